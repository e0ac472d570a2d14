// One request of middleware/openai's client matrix (clients_test.go) with
// the Vercel AI SDK (ai) and its OpenAI-compatible provider. Usage:
// node vercel_client.mjs stream|plain, with BASE_URL (the adapter's /v1)
// and AGENTBOX_USER ("<user>:<chat>") set. It prints one JSON object of
// observations; the Go test asserts on them.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { generateText, streamText } from "ai";

const mode = process.argv[2];
const provider = createOpenAICompatible({
  name: "agentbox",
  baseURL: process.env.BASE_URL,
  apiKey: "unused",
  includeUsage: true,
});
const opts = {
  model: provider.chatModel("coder"),
  prompt: "run the slow build",
  // The provider sends its "user" option as the request's user field.
  providerOptions: { agentbox: { user: process.env.AGENTBOX_USER } },
};
const usageOf = (u) => (u ? { prompt: u.inputTokens, completion: u.outputTokens, total: u.totalTokens } : null);

const out = { text: "", usage: null, finish: null, parts: 0, spreadMs: 0, error: null };
try {
  if (mode === "stream") {
    // streamText reports errors to onError instead of throwing them.
    const errors = [];
    const result = streamText({ ...opts, onError: ({ error }) => errors.push(String(error?.stack ?? error)) });
    let first = 0;
    for await (const piece of result.textStream) {
      if (piece === "") continue;
      out.text += piece;
      out.parts++;
      first ||= Date.now();
      out.spreadMs = Date.now() - first;
    }
    out.usage = usageOf(await result.usage);
    out.finish = await result.finishReason;
    if (errors.length > 0) out.error = errors.join("; ");
  } else if (mode === "plain") {
    const result = await generateText(opts);
    out.text = result.text;
    out.usage = usageOf(result.usage);
    out.finish = result.finishReason;
  } else {
    throw new Error(`unknown mode ${mode}; use stream or plain`);
  }
} catch (e) {
  out.error = `${e.constructor.name}: ${e.message}`;
}
console.log(JSON.stringify(out));
