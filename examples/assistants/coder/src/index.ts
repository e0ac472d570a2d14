// Hooks of the example coder assistant (the contract: hooks/doc.go; the
// types: jsapi/sandbox.d.ts). Create runs after the sandbox is ready and
// before the agent; Next runs after the agent, before the container goes.

interface Message {
  role: string;
  content: string;
}

function Create(ctx: any, messages: Message[], options: any) {
  if (!ctx.sandbox) {
    return null; // not sandboxed: keep the conversation as it is
  }
  const id = ctx.SendStream({ type: "loading", props: { message: "Preparing the workspace..." } });
  const runs = (ctx.memory.chat.Get("runs") || 0) + 1;
  ctx.memory.chat.Set("runs", runs);
  const files = ctx.sandbox.ListDir(".").filter((f: any) => !f.name.startsWith("."));
  log.Info("run %d of chat %s: %d files in the workspace", runs, ctx.chat_id, files.length);
  ctx.Replace(id, {
    type: "text",
    props: { content: `Sandbox ready (run ${runs} of this chat, ${files.length} files in the workspace)` },
  });
  ctx.End(id);
  return null;
}

function Next(ctx: any, payload: { completion: any; error: any }, options: any) {
  if (payload.error || !ctx.sandbox) {
    return null; // keep the default response
  }
  for (const f of ctx.sandbox.ListDir(".")) {
    if (!f.is_dir && !f.name.startsWith(".")) {
      log.Info("workspace file %s (%d bytes)", f.name, f.size);
    }
  }
  return null;
}
