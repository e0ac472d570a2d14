// One request of middleware/openai's client matrix (clients_test.go) with
// the official openai npm package. Usage: node openai_client.mjs stream|plain,
// with BASE_URL (the adapter's /v1) and AGENTBOX_USER ("<user>:<chat>") set.
// It prints one JSON object of observations; the Go test asserts on them.
import OpenAI from "openai";

const mode = process.argv[2];
const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: "unused" });
const params = {
  model: "coder",
  user: process.env.AGENTBOX_USER,
  messages: [{ role: "user", content: "run the slow build" }],
};
const usageOf = (u) => (u ? { prompt: u.prompt_tokens, completion: u.completion_tokens, total: u.total_tokens } : null);

const out = { text: "", usage: null, finish: null, parts: 0, spreadMs: 0, error: null };
try {
  if (mode === "stream") {
    const stream = await client.chat.completions.create({
      ...params,
      stream: true,
      stream_options: { include_usage: true },
    });
    let first = 0;
    for await (const chunk of stream) {
      const piece = chunk.choices[0]?.delta?.content ?? "";
      if (piece !== "") {
        out.text += piece;
        out.parts++;
        first ||= Date.now();
        out.spreadMs = Date.now() - first;
      }
      if (chunk.choices[0]?.finish_reason) out.finish = chunk.choices[0].finish_reason;
      if (chunk.usage) out.usage = usageOf(chunk.usage);
    }
  } else if (mode === "plain") {
    const comp = await client.chat.completions.create(params);
    out.text = comp.choices[0].message.content;
    out.finish = comp.choices[0].finish_reason;
    out.usage = usageOf(comp.usage);
  } else {
    throw new Error(`unknown mode ${mode}; use stream or plain`);
  }
} catch (e) {
  out.error = `${e.constructor.name}: ${e.message}`;
}
console.log(JSON.stringify(out));
