// One request of middleware/openai's client matrix (clients_test.go) with
// the Vercel AI SDK (ai) through its OpenAI provider on the Responses API
// or its Anthropic provider on the Messages API. Usage: node
// vercel_doors.mjs responses|messages stream|plain, with BASE_URL (the
// adapter's /v1) and AGENTBOX_USER ("<user>:<chat>") set; the ids travel
// in the X-Agentbox-* headers. It prints one JSON object of
// observations; the Go test asserts on them.
import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { generateText, streamText } from "ai";

// The output is the JSON line alone: the SDK's warnings would go to it.
globalThis.AI_SDK_LOG_WARNINGS = false;
const [door, mode] = process.argv.slice(2);
// PROMPT and QUICK_PROMPT (the first of two turns) default to the matrix's.
const prompt = process.env.PROMPT ?? "run the slow build";

const [user, chat] = process.env.AGENTBOX_USER.split(":");
const headers = { "X-Agentbox-User": user, "X-Agentbox-Chat": chat };
let model;
if (door === "responses") {
  model = createOpenAI({ baseURL: process.env.BASE_URL, apiKey: "unused", headers }).responses("coder");
} else if (door === "messages") {
  model = createAnthropic({ baseURL: process.env.BASE_URL, apiKey: "unused", headers })("coder");
} else {
  throw new Error(`unknown door ${door}; use responses or messages`);
}
const opts = { model, prompt: prompt, maxOutputTokens: 1024 };
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
