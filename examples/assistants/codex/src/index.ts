// Hooks of the example codex assistant (the contract: hooks/doc.go; the
// types: jsapi/sandbox.d.ts): they run around the Codex CLI as coder's run
// around Claude Code. Create counts the chat's runs and tells the user what
// the workspace holds; Next notes what the agent left there.

function Create(ctx: any, messages: { role: string; content: string }[], options: any) {
  if (!ctx.sandbox) {
    return null;
  }
  const runs = (ctx.memory.chat.Get("runs") || 0) + 1;
  ctx.memory.chat.Set("runs", runs);
  const names = ctx.sandbox.ListDir(".").map((f: any) => f.name).filter((n: string) => !n.startsWith("."));
  const id = ctx.SendStream({ type: "text", props: { content: `Codex sandbox ready (run ${runs}): ${names.length} files` } });
  ctx.End(id);
  return null;
}

function Next(ctx: any, payload: { completion: any; error: any }, options: any) {
  if (!payload.error && ctx.sandbox) {
    const names = ctx.sandbox.ListDir(".").filter((f: any) => !f.is_dir).map((f: any) => f.name);
    log.Info("codex left %d files: %s", names.length, names.join(", "));
  }
  return null;
}
