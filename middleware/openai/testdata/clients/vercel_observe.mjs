// What middleware/openai's client matrix (clients_test.go) observes of
// one Vercel AI SDK (ai) request, for vercel_client.mjs and
// vercel_doors.mjs: observe(mode, opts) runs streamText ("stream") or
// generateText ("plain") with opts and prints one JSON object of
// observations; the Go tests assert on them.
import { generateText, streamText } from "ai";

const usageOf = (u) => (u ? { prompt: u.inputTokens, completion: u.outputTokens, total: u.totalTokens } : null);

export async function observe(mode, opts) {
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
}
