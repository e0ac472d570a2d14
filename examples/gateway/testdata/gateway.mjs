// The openai npm package against the example gateway (examples/gateway's
// TestNodeSDK): the same prompt for the coder assistant on two chats,
// streamed and not; prints one JSON object for the Go test to check.
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.env.BASE_URL, apiKey: "unused", maxRetries: 0 });
const prompt = process.env.PROMPT;
const ask = (chat) => ({
  model: "coder",
  messages: [{ role: "user", content: prompt }],
  user: `node:${chat}`,
});

const plain = await client.chat.completions.create(ask(`plain-${Date.now()}`));
const stream = await client.chat.completions.create({
  ...ask(`streamed-${Date.now()}`),
  stream: true,
  stream_options: { include_usage: true },
});
let streamed = "";
let streamFinish = null;
let last = null;
const tools = [];
for await (const chunk of stream) {
  last = chunk;
  for (const c of chunk.choices) {
    streamed += c.delta?.content ?? "";
    if (c.finish_reason) streamFinish = c.finish_reason;
  }
  if (chunk.agentbox?.kind === "tool_use") tools.push(chunk.agentbox.tool.name);
}
console.log(JSON.stringify({
  Content: plain.choices[0].message.content,
  Finish: plain.choices[0].finish_reason,
  Usage: plain.usage,
  Streamed: streamed,
  StreamFinish: streamFinish,
  StreamUsage: last?.usage ?? null,
  UsageInLastChunk: !!last?.usage,
  Tools: tools,
}));
