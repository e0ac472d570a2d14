// One request of middleware/openai's client matrix (clients_test.go) with
// the Vercel AI SDK (ai) through its OpenAI provider on the Responses API
// or its Anthropic provider on the Messages API. Usage: node
// vercel_doors.mjs responses|messages stream|plain, with BASE_URL (the
// adapter's /v1) and AGENTBOX_USER ("<user>:<chat>") set; the ids travel
// in the X-Agentbox-* headers. It prints one JSON object of
// observations (vercel_observe.mjs).
import { createAnthropic } from "@ai-sdk/anthropic";
import { createOpenAI } from "@ai-sdk/openai";
import { observe } from "./vercel_observe.mjs";

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
await observe(mode, opts);
