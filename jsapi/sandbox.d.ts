// Types of the agentbox hook API, for authors of an assistant's
// src/index.ts. Copy this file next to it (or reference it with
// /// <reference path="sandbox.d.ts" />) and annotate the hooks:
//
//   function Create(ctx: Ctx, messages: Message[], options: Options): CreateResult { ... }
//   function Next(ctx: Ctx, payload: NextPayload, options: Options): NextResult { ... }
//
// A hook may be async (or return a Promise): `async function Create(...):
// Promise<CreateResult>`. Its Promise is awaited within the same budget;
// a rejection counts as a throw (Create rejects the request). Only
// ctx.sandbox calls and promises that resolve at once can be awaited:
// there are no timers or I/O events, so a Promise still pending when
// nothing is left to run is an error.
//
// agentbox compiles TypeScript with esbuild, which strips types without
// checking them; check them yourself, without the DOM library (this file
// declares console):
//   tsc --noEmit --strict --target es2017 --lib es2020 sandbox.d.ts src/index.ts
// examples/hooks/typed/src/index.ts is the seed's example with these types. The runtime is
// goja (ECMAScript 5.1 plus most of ES2015+), not Node.js: there is no
// require, no process, no timers, no network. Every hook invocation gets
// a fresh runtime: nothing survives between requests except what you put
// in ctx.memory.chat. Each call has a time budget (hook_timeout), and
// ctx.sandbox calls are capped in number and bytes.
// This file is checked against the runtime by jsapi's TestDeclarations and
// TestDeclarationsMatchGoTypes, and with tsc by examples/hooks'
// TestSandboxDeclarationsTypeCheck.

/** One message of the conversation. */
interface Message {
  role: "system" | "user" | "assistant";
  content: string;
}

/** An entry of ctx.sandbox.ListDir, or the result of ctx.sandbox.Stat. */
interface FileInfo {
  name: string;
  size: number;
  is_dir: boolean;
  /** RFC 3339 time in UTC, e.g. "2026-11-22T18:01:25.424Z". */
  mod_time: string;
}

/**
 * One edit of ctx.sandbox.EditFile. The mode follows from the fields set
 * (precedence range > insert > delete > replace):
 *   replace:             { old, new, all? }
 *   delete:              { old, delete: true }
 *   insert before/after: { old, insert: "before" | "after", content }
 *   insert start/end:    { insert: "start" | "end", content }
 *   range:               { from, to, content } (both anchors included)
 * Matching is exact, then ignoring trailing whitespace, then with the
 * indentation adjusted; every edit applies to the original text, and
 * overlapping edits are refused.
 */
interface Edit {
  old?: string;
  new?: string;
  all?: boolean;
  delete?: boolean;
  insert?: "before" | "after" | "start" | "end";
  content?: string;
  from?: string;
  to?: string;
}

/** One changed region of an EditResult. */
interface Change {
  /** 1-based line of the original. */
  line: number;
  removed: number;
  added: number;
}

/** What ctx.sandbox.EditFile did. */
interface EditResult {
  /** The file's new content. */
  content: string;
  /** How many edits were applied. */
  applied: number;
  /** The changed regions. */
  changes: Change[];
}

/** Options of ctx.sandbox.Exec. */
interface ExecOptions {
  /** Working directory, relative to the workspace or under /workspace. */
  dir?: string;
  /** Extra environment variables. */
  env?: { [name: string]: string };
  /** Standard input. */
  stdin?: string;
  /** Timeout in milliseconds (bounded by the hook's own budget). */
  timeout?: number;
}

/** The Error that ctx.sandbox.Exec throws for a non-zero exit. */
interface ExecError extends Error {
  exit_code: number;
  stdout: string;
  stderr: string;
}

/**
 * The chat's sandbox. Paths are relative to the workspace or absolute
 * under /workspace; anything else (.., other absolute paths, symlinks,
 * FIFOs, devices) throws. Files are read and written on the host, not
 * through the container.
 */
interface Sandbox {
  /** The workspace inside the container: "/workspace". */
  readonly workdir: string;
  /** The file's content as a string; throws when it is missing. */
  ReadFile(path: string): string;
  /** Creates or replaces the file (parent directories included). */
  WriteFile(path: string, content: string): void;
  ListDir(path: string): FileInfo[];
  Stat(path: string): FileInfo;
  EditFile(path: string, edits: Edit[]): EditResult;
  /** Runs argv in the container; returns stdout, throws ExecError on a non-zero exit. */
  Exec(argv: string[], options?: ExecOptions): string;
}

/** A key-value store; values are JSON-like. */
interface Store {
  Get(key: string): any;
  Has(key: string): boolean;
  Set(key: string, value: any): void;
  Del(key: string): void;
}

/** A message to the user's UI, sent as an event of the response stream. */
interface UIMessage {
  type: string;
  props?: { [key: string]: any };
}

/** The first argument of both hooks. */
interface Ctx {
  readonly user_id: string;
  readonly chat_id: string;
  readonly assistant_id: string;
  /**
   * The workspace checkpoint the run started from; null when the
   * assistant keeps none. restored: the workspace was put back to it for
   * this request (the history returned to an earlier point); missing: the
   * history returned to a point whose checkpoint is gone, and the run
   * started from the current files.
   */
  readonly checkpoint: {
    readonly id: string;
    readonly label: string;
    readonly restored: boolean;
    readonly missing: boolean;
  } | null;
  /** The chat's sandbox; null when the assistant has no sandbox block. */
  readonly sandbox: Sandbox | null;
  readonly memory: {
    /** This request only (shared by Create and Next). */
    readonly context: Store;
    /** Survives across the chat's requests. */
    readonly chat: Store;
  };
  /** Sends a UI message and returns its id. */
  SendStream(msg: UIMessage): string;
  /** Replaces the UI message id. */
  Replace(id: string, msg: UIMessage): void;
  /** Ends the UI message id. */
  End(id: string): void;
}

/** The client's completion options (temperature, max_tokens, ...). */
interface Options {
  [key: string]: any;
}

/** Create's result: null keeps the conversation, {messages} replaces it; throw to reject the request. */
type CreateResult = { messages: Message[] } | null | undefined;

/** Tokens the agent's run used, as its CLI reported them. */
interface Usage {
  input_tokens: number;
  output_tokens: number;
  cache_creation_input_tokens: number;
  cache_read_input_tokens: number;
}

/** A tool call the agent's CLI refused. */
interface PermissionDenial {
  tool_name: string;
  tool_use_id: string;
  tool_input?: any;
}

/** The agent's outcome, as Next sees it. */
interface Completion {
  content: string;
  finish_reason: string;
  is_error: boolean;
  /** The CLI's result subtype ("success", "error_max_turns", ...). */
  subtype?: string;
  /** The CLI's error texts when is_error. */
  errors?: string[];
  /** The upstream HTTP status of a failed model call. */
  api_error_status?: number;
  session_id?: string;
  num_turns?: number;
  /** The run's duration in nanoseconds. */
  duration?: number;
  cost_usd?: number;
  usage: Usage;
  permission_denials?: PermissionDenial[];
}

/** Next's second argument. */
interface NextPayload {
  completion: Completion | null;
  /** Why the run failed, or null. */
  error: string | null;
}

/** Next's result: null keeps the response, {content} replaces it. */
type NextResult = { content: string; finish_reason?: string } | null | undefined;

/** printf-style logging to the gateway's log (%s %d %i %f %v %j %o %O %%). */
declare const log: {
  Trace(format: string, ...args: any[]): void;
  Debug(format: string, ...args: any[]): void;
  Info(format: string, ...args: any[]): void;
  Warn(format: string, ...args: any[]): void;
  Error(format: string, ...args: any[]): void;
};

/** console.* write to the same log. */
declare const console: {
  log(...args: any[]): void;
  info(...args: any[]): void;
  debug(...args: any[]): void;
  trace(...args: any[]): void;
  warn(...args: any[]): void;
  error(...args: any[]): void;
};
