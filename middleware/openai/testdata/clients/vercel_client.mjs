// One request of middleware/openai's client matrix (clients_test.go) with
// the Vercel AI SDK (ai) and its OpenAI-compatible provider. Usage:
// node vercel_client.mjs stream|plain, with BASE_URL (the adapter's /v1)
// and AGENTBOX_USER ("<user>:<chat>") set. It prints one JSON object of
// observations (vercel_observe.mjs).
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { observe } from "./vercel_observe.mjs";

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
await observe(mode, opts);
