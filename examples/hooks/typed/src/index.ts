// The seed's Create and Next examples (coder/src/index.ts, sections 4.6.2
// and 4.6.3 of the core seed) with the types of jsapi/sandbox.d.ts: copy
// that file next to your hooks and check them with
//   tsc --noEmit --strict --target es2017 --lib es2020 sandbox.d.ts src/index.ts
// agentbox itself only strips the types (esbuild); it does not check them.

/**
 * Create Hook - runs after container created, before LLM execution
 */
function Create(ctx: Ctx, messages: Message[], options: Options): CreateResult {
  if (!ctx.sandbox) {
    return { messages };
  }

  const loadingId = ctx.SendStream({
    type: "loading",
    props: { message: "Preparing sandbox environment..." },
  });

  ctx.sandbox.WriteFile(".env", "DEBUG=true\nNODE_ENV=development");

  try {
    const nodeVersion = ctx.sandbox.Exec(["node", "--version"]);
    log.Info(`Node.js version: ${nodeVersion}`);
  } catch (e) {
    const err = e as ExecError;
    log.Error("Node.js not available (exit code %d)", err.exit_code);
    ctx.End(loadingId);
    throw new Error("Node.js is required");
  }

  const files: FileInfo[] = ctx.sandbox.ListDir(".");
  log.Debug(`Workspace files: ${files.map((f) => f.name).join(", ")}`);

  ctx.Replace(loadingId, {
    type: "text",
    props: { content: "Sandbox ready" },
  });
  ctx.End(loadingId);

  return { messages };
}

/**
 * Next Hook - runs after LLM execution, before container cleanup
 */
function Next(ctx: Ctx, payload: NextPayload, options: Options): NextResult {
  const { completion, error } = payload;

  if (error || !ctx.sandbox) {
    return null;
  }

  try {
    const result = ctx.sandbox.ReadFile("output/result.json");
    log.Info(`Generated output: ${result}`);
    ctx.memory.context.Set("generated_result", JSON.parse(result));
  } catch (e) {
    log.Debug("No result file generated");
  }

  for (const file of ctx.sandbox.ListDir("src/")) {
    log.Debug(`Generated: ${file.name} (${file.size} bytes)`);
  }

  try {
    ctx.sandbox.Exec(["git", "add", "."]);
    ctx.sandbox.Exec(["git", "commit", "-m", "auto-commit by sandbox"]);
    log.Info("Changes committed");
  } catch (e) {
    log.Debug(`git commit skipped: ${(e as Error).message}`);
  }

  try {
    ctx.sandbox.Exec(["rm", "-rf", "tmp/"]);
  } catch (e) {
    // Ignore cleanup errors
  }

  log.Debug("%d output tokens", completion?.usage.output_tokens ?? 0);
  return null; // Use default response
}
