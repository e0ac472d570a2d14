// The real-client check of middleware/openai with the official openai npm
// package: run by node_test.go with BASE_URL set to the adapter. It prints
// one JSON object of observations; the Go test asserts on them.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: "unused", maxRetries: 2 });

const params = (user, model = "coder") => ({
  model,
  user,
  messages: [
    { role: "system", content: "be brief" },
    { role: "user", content: "write hello.txt" },
  ],
});

async function failure(fn) {
  try {
    await fn();
    return { ok: true };
  } catch (e) {
    return {
      name: e.constructor.name,
      isAPIError: e instanceof OpenAI.APIError,
      status: e.status ?? null,
      code: e.code ?? null,
      type: e.type ?? null,
      param: e.param ?? null,
      message: e.message,
    };
  }
}

const out = {};

const comp = await client.chat.completions.create(params("alice:1"));
out.content = comp.choices[0].message.content;
out.finish = comp.choices[0].finish_reason;
out.usage = comp.usage;

const stream = await client.chat.completions.create({
  ...params("alice:2"),
  stream: true,
  stream_options: { include_usage: true },
});
let text = "";
const kinds = {};
let chunks = 0;
let usageAt = -1;
let streamFinish = null;
let streamUsage = null;
for await (const chunk of stream) {
  if (chunk.choices.length > 0) {
    text += chunk.choices[0].delta?.content ?? "";
    if (chunk.choices[0].finish_reason) streamFinish = chunk.choices[0].finish_reason;
  }
  if (chunk.usage) {
    usageAt = chunks;
    streamUsage = chunk.usage;
  }
  if (chunk.agentbox) kinds[chunk.agentbox.kind] = (kinds[chunk.agentbox.kind] ?? 0) + 1;
  chunks++;
}
out.streamed = text;
out.streamFinish = streamFinish;
out.streamUsage = streamUsage;
out.usageInLastChunk = usageAt === chunks - 1;
out.chunks = chunks;
out.kinds = kinds;

out.notFound = await failure(() => client.chat.completions.create(params("alice:1", "gpt-nope")));
out.missingChat = await failure(() => client.chat.completions.create(params("alice")));
out.agentFailed = await failure(() => client.chat.completions.create(params("alice:3")));
out.agentFailedStreamed = await failure(async () => {
  const s = await client.chat.completions.create({ ...params("alice:3"), stream: true });
  for await (const _ of s) {
    // drain
  }
});

console.log(JSON.stringify(out));
