// One request of middleware/openai's client matrix (clients_test.go) with
// the official openai npm package on the Responses API. Usage: node
// responses_client.mjs stream|plain|turns, with BASE_URL (the adapter's
// /v1) and AGENTBOX_USER ("<user>:<chat>", or "<user>" for turns) set.
// turns sends a quick first turn, then the slow one by
// previous_response_id alone. It prints one JSON object of observations;
// the Go test asserts on them.
import OpenAI from "openai";

const mode = process.argv[2];
// PROMPT and QUICK_PROMPT (the first of two turns) default to the matrix's.
const prompt = process.env.PROMPT ?? "run the slow build";
const quick = process.env.QUICK_PROMPT ?? "start the build";

const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: "unused" });
const user = process.env.AGENTBOX_USER;
const usageOf = (u) => (u ? { prompt: u.input_tokens, completion: u.output_tokens, total: u.total_tokens } : null);

const out = { text: "", usage: null, finish: null, parts: 0, spreadMs: 0, error: null, ids: [] };
try {
  let previous;
  if (mode === "turns") {
    const first = await client.responses.create({ model: "coder", user, input: quick });
    out.ids.push(first.id);
    previous = first.id;
  }
  if (mode === "stream" || mode === "turns") {
    // The SDK's stream helper: it accumulates the events into the final
    // response, and throws on events it cannot place.
    const stream = client.responses.stream({
      model: "coder",
      user,
      input: prompt,
      ...(previous ? { previous_response_id: previous } : {}),
    });
    let first = 0;
    for await (const ev of stream) {
      if (ev.type === "response.output_text.delta" && ev.delta !== "") {
        out.parts++;
        first ||= Date.now();
        out.spreadMs = Date.now() - first;
      }
    }
    // finalResponse is response.completed's response, without the
    // output_text convenience that create adds: the text is the messages'.
    const final = await stream.finalResponse();
    out.ids.push(final.id);
    out.text = final.output
      .filter((o) => o.type === "message")
      .flatMap((o) => o.content.filter((c) => c.type === "output_text").map((c) => c.text))
      .join("");
    out.usage = usageOf(final.usage);
    out.finish = final.status;
  } else if (mode === "plain") {
    const resp = await client.responses.create({ model: "coder", user, input: prompt });
    out.ids.push(resp.id);
    out.text = resp.output_text;
    out.finish = resp.status;
    out.usage = usageOf(resp.usage);
  } else {
    throw new Error(`unknown mode ${mode}; use stream, plain or turns`);
  }
} catch (e) {
  out.error = `${e.constructor.name}: ${e.message}`;
}
console.log(JSON.stringify(out));
