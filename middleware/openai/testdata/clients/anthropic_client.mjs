// One request of middleware/openai's client matrix (clients_test.go) with
// the official @anthropic-ai/sdk package on the Messages API. Usage: node
// anthropic_client.mjs stream|plain, with BASE_URL (the adapter's /v1) and
// AGENTBOX_USER ("<user>:<chat>") set. It prints one JSON object of
// observations; the Go test asserts on them.
import Anthropic from "@anthropic-ai/sdk";

const mode = process.argv[2];
// PROMPT and QUICK_PROMPT (the first of two turns) default to the matrix's.
const prompt = process.env.PROMPT ?? "run the slow build";

// The SDK appends /v1/messages to its base URL.
const client = new Anthropic({ baseURL: process.env.BASE_URL.replace(/\/v1$/, ""), apiKey: "unused" });
const params = {
  model: "coder",
  max_tokens: 1024,
  metadata: { user_id: process.env.AGENTBOX_USER },
  messages: [{ role: "user", content: prompt }],
};
const usageOf = (u) => {
  if (!u) return null;
  const prompt = u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0);
  return { prompt, completion: u.output_tokens, total: prompt + u.output_tokens };
};
const textOf = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");

const out = { text: "", usage: null, finish: null, parts: 0, spreadMs: 0, error: null };
try {
  if (mode === "stream") {
    const stream = client.messages.stream(params);
    let first = 0;
    stream.on("text", (delta) => {
      if (delta === "") return;
      out.parts++;
      first ||= Date.now();
      out.spreadMs = Date.now() - first;
    });
    const final = await stream.finalMessage();
    out.text = textOf(final);
    out.usage = usageOf(final.usage);
    out.finish = final.stop_reason;
  } else if (mode === "plain") {
    const msg = await client.messages.create(params);
    out.text = textOf(msg);
    out.usage = usageOf(msg.usage);
    out.finish = msg.stop_reason;
  } else {
    throw new Error(`unknown mode ${mode}; use stream or plain`);
  }
} catch (e) {
  out.error = `${e.constructor.name}: ${e.message}`;
}
console.log(JSON.stringify(out));
