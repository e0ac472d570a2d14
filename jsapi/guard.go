package jsapi

import (
	"errors"
	"fmt"
	"runtime/metrics"
	"time"

	"github.com/dlclark/regexp2/v2"
	"github.com/dop251/goja"
)

// ErrHeapLimit marks a hook interrupted because the heap grew past
// Options.MaxHeapGrowth while it ran.
var ErrHeapLimit = errors.New("jsapi: hook used too much memory")

// regexpMatchTimeout bounds one backtracking regular-expression match.
// goja runs RE2-compatible patterns on Go's linear-time regexp and the rest
// (backreferences, lookaround) on regexp2, whose matcher is native code that
// Interrupt cannot stop. regexp2 reads this default when a pattern is
// compiled; a match that passes it is abandoned and reported as no match,
// after which the hook's own budget interrupt takes effect.
const regexpMatchTimeout = 100 * time.Millisecond

func init() {
	// goja is the only user of regexp2 in this module (only jsapi imports
	// goja), so the process-wide default is ours to set.
	regexp2.DefaultMatchTimeout = regexpMatchTimeout
}

// guardSrc replaces the built-ins that allocate or loop in one native,
// uninterruptible step with versions that check the size first: string
// builders (repeat, padStart, padEnd, join, replace, replaceAll), the
// Array methods that walk `length` (also on array-likes such as
// {length: 2**53}), Array.from over array-likes, argument spreading through
// apply, and typed-array and ArrayBuffer allocation. It runs before the
// script, in every fresh runtime, and keeps the originals in its closure.
const guardSrc = `(function (maxStr, maxArr, maxBytes) {
  "use strict";
  var S = String.prototype, A = Array.prototype, F = Function.prototype, G = globalThis;
  var rApply = Reflect.apply, rConstruct = Reflect.construct, defProp = Object.defineProperty;
  var isArray = Array.isArray, RegExpC = RegExp;
  function def(o, name, fn) {
    defProp(o, name, { value: fn, writable: true, configurable: true, enumerable: false });
  }
  function len(o) {
    var n = Number(o.length);
    return n > 0 ? Math.floor(n) : 0;
  }
  function tooLong(what, n) {
    return new RangeError(what + " would build a string of " + n + " characters, more than the " + maxStr + " allowed in a hook");
  }
  function tooMany(what, n) {
    return new RangeError(what + " over " + n + " elements, more than the " + maxArr + " allowed in a hook");
  }
  var origRepeat = S.repeat, origPadStart = S.padStart, origPadEnd = S.padEnd;
  def(S, "repeat", function repeat(count) {
    var s = String(this), n = s.length * Math.floor(Number(count));
    if (n > maxStr) throw tooLong("String.prototype.repeat", n);
    return rApply(origRepeat, s, [count]);
  });
  def(S, "padStart", function padStart(n, pad) {
    if (Number(n) > maxStr) throw tooLong("String.prototype.padStart", Number(n));
    return rApply(origPadStart, this, [n, pad]);
  });
  def(S, "padEnd", function padEnd(n, pad) {
    if (Number(n) > maxStr) throw tooLong("String.prototype.padEnd", Number(n));
    return rApply(origPadEnd, this, [n, pad]);
  });

  var replace = S.replace, replaceAll = S.replaceAll, indexOf = S.indexOf, exec = RegExpC.prototype.exec;
  // count returns how many times pattern matches s, counting no further
  // than limit: one native step per match found, never an array of all
  // matches (String.prototype.match or split over a long string is one
  // uninterruptible step that builds a value per match). It returns -1
  // for a pattern it does not know (an object with its own Symbol.replace).
  function count(s, pattern, all, limit) {
    var n = 0, i;
    if (typeof pattern === "string") {
      if (!all) return rApply(indexOf, s, [pattern]) >= 0 ? 1 : 0;
      if (pattern === "") return Math.min(s.length + 1, limit);
      for (i = rApply(indexOf, s, [pattern]); i >= 0 && n < limit; i = rApply(indexOf, s, [pattern, i + pattern.length])) n++;
      return n;
    }
    if (!(pattern instanceof RegExpC)) return -1;
    // A clone, so that the script's lastIndex and its own exec are not used.
    var re = new RegExpC(pattern.source, pattern.flags);
    if (!re.global) return rApply(exec, re, [s]) === null ? 0 : 1;
    re.lastIndex = 0;
    for (var m; n < limit && (m = rApply(exec, re, [s])) !== null; n++) {
      if (m[0] === "") re.lastIndex++;
    }
    return n;
  }
  // checkReplace throws before a replacement builds a string longer than
  // maxStr. Each match adds the replacement text, plus the whole string
  // for each $\x60 or $' in it; $& and $1.. add at most the string once in
  // all. Matches are counted only when the most a pattern can have
  // (s.length + 1) could pass the limit, and only until they do.
  function checkReplace(what, self, pattern, repl, all) {
    if (typeof repl === "function" || self == null) return;
    var s = String(self), r = String(repl);
    var perMatch = 0, perContext = 0;
    for (var i = r.indexOf("$"); i >= 0 && i + 1 < r.length; i = r.indexOf("$", i + 1)) {
      var c = r.charAt(i + 1);
      if (c === "'" || c === "\x60") perContext++; else perMatch++;
    }
    var fixed = s.length + perMatch * s.length, each = r.length + perContext * s.length;
    if (fixed + (s.length + 1) * each <= maxStr) return;
    var need = each > 0 ? Math.max(1, Math.floor((maxStr - fixed) / each) + 1) : 1;
    var n = count(s, pattern, all, need);
    if (n <= 0) return;
    var total = fixed + n * each;
    if (total > maxStr) throw new RangeError(what + " would build a string of at least " + total + " characters, more than the " + maxStr + " allowed in a hook");
  }
  def(S, "replace", function replace_(pattern, repl) {
    checkReplace("String.prototype.replace", this, pattern, repl, false);
    return rApply(replace, this, [pattern, repl]);
  });
  def(S, "replaceAll", function replaceAll_(pattern, repl) {
    checkReplace("String.prototype.replaceAll", this, pattern, repl, true);
    return rApply(replaceAll, this, [pattern, repl]);
  });

  // join converts each element once, adds up the length, and leaves the
  // concatenation to the native join: building the result with += in a
  // loop copies it once per element (quadratic, and each copy of a
  // string of megabytes is one uninterruptible step).
  var joining = [], origJoin = A.join;
  def(A, "join", function join(sep) {
    var o = Object(this), n = len(o);
    if (n > maxArr) throw tooMany("Array.prototype.join", n);
    if (joining.indexOf(o) >= 0) return "";
    sep = sep === undefined ? "," : String(sep);
    if (n > 1 && (n - 1) * sep.length > maxStr) throw tooLong("Array.prototype.join", (n - 1) * sep.length);
    joining.push(o);
    try {
      var parts = [], total = 0;
      for (var i = 0; i < n; i++) {
        var v = o[i], p = v === undefined || v === null ? "" : String(v);
        total += p.length + (i > 0 ? sep.length : 0);
        if (total > maxStr) throw tooLong("Array.prototype.join", total);
        parts[i] = p;
      }
      return rApply(origJoin, parts, [sep]);
    } finally {
      joining.pop();
    }
  });
  ["concat", "copyWithin", "every", "fill", "filter", "find", "findIndex", "findLast", "findLastIndex",
   "flat", "flatMap", "forEach", "includes", "indexOf", "lastIndexOf", "map", "reduce", "reduceRight",
   "reverse", "slice", "some", "sort", "splice", "toLocaleString", "toReversed", "toSorted", "toSpliced",
   "unshift", "with"].forEach(function (name) {
    var orig = A[name];
    if (typeof orig !== "function") return;
    def(A, name, function () {
      var n = len(Object(this));
      if (n > maxArr) throw tooMany("Array.prototype." + name, n);
      return rApply(orig, this, arguments);
    });
  });
  var from = Array.from;
  def(Array, "from", function from_(items) {
    if (items != null && typeof items[Symbol.iterator] !== "function" && len(Object(items)) > maxArr) {
      throw tooMany("Array.from", len(Object(items)));
    }
    return rApply(from, this, arguments);
  });
  function argList(what, args) {
    if (args == null) return [];
    var n = len(Object(args));
    if (n > 65536) throw new RangeError(what + " with " + n + " arguments, more than the 65536 allowed in a hook");
    return args;
  }
  def(F, "apply", function apply(thisArg, args) {
    return rApply(this, thisArg, argList("Function.prototype.apply", args));
  });
  def(Reflect, "apply", function apply(target, thisArg, args) {
    return rApply(target, thisArg, argList("Reflect.apply", args));
  });
  def(Reflect, "construct", function construct(target, args, newTarget) {
    args = argList("Reflect.construct", args);
    return arguments.length > 2 ? rConstruct(target, args, newTarget) : rConstruct(target, args);
  });

  ["ArrayBuffer", "SharedArrayBuffer", "Int8Array", "Uint8Array", "Uint8ClampedArray", "Int16Array", "Uint16Array",
   "Int32Array", "Uint32Array", "Float32Array", "Float64Array", "BigInt64Array", "BigUint64Array"].forEach(function (name) {
    var C = G[name];
    if (typeof C !== "function") return;
    var size = C.BYTES_PER_ELEMENT || 1;
    function check(a) {
      var n = typeof a === "number" ? a : (a != null && typeof a === "object" && !isArray(a) && !(a instanceof G.ArrayBuffer) ? len(a) : 0);
      if (n * size > maxBytes) throw new RangeError(name + " of " + (n * size) + " bytes, more than the " + maxBytes + " allowed in a hook");
    }
    var P = new Proxy(C, {
      construct: function (t, args, nt) { check(args[0]); return rConstruct(t, args, nt === P ? t : nt); }
    });
    if (typeof C.from === "function") {
      var cfrom = C.from;
      def(P, "from", function (src) { check(src); return rApply(cfrom, this === P ? C : this, arguments); });
    }
    def(C.prototype, "constructor", P);
    def(G, name, P);
  });
})`

var guardPrg = goja.MustCompile("agentbox-guard.js", guardSrc, true)

func (inv *invocation) installGuards() error {
	v, err := inv.rt.RunProgram(guardPrg)
	if err != nil {
		return fmt.Errorf("install guards: %w", err)
	}
	fn, _ := goja.AssertFunction(v)
	o := inv.h.opts
	if _, err := fn(goja.Undefined(), inv.rt.ToValue(o.MaxStringLength), inv.rt.ToValue(o.MaxArrayLength), inv.rt.ToValue(o.MaxSandboxBytes)); err != nil {
		return fmt.Errorf("install guards: %w", err)
	}
	return nil
}

// heapSample reads the bytes held by heap objects (live and not yet swept),
// which grows as soon as a large allocation is made.
func heapSample() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return s[0].Value.Uint64()
}

// watchHeap interrupts the invocation when the process heap grows by more
// than limit bytes during one stretch of pure script execution. The heap is
// process-wide, so the watchdog re-baselines whenever the script enters or
// leaves a Go callback (a long ctx.sandbox.Exec lets the rest of the
// gateway allocate freely); what it catches is a script that allocates in
// a loop (s += s, push) long before the machine runs out of memory.
// Growth counts from the lowest heap seen, not from the first sample. The
// returned function stops the watchdog.
func (inv *invocation) watchHeap(limit uint64) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		base, epoch := heapSample(), inv.epoch.Load()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			now, e := heapSample(), inv.epoch.Load()
			if e != epoch || e%2 == 1 {
				base, epoch = now, e
				continue
			}
			// The baseline follows the heap down: an invocation that
			// starts while an earlier one's garbage is still counted
			// (hundreds of MiB after a hostile hook) would otherwise
			// measure its growth from a peak the collector then
			// sweeps away, and never reach the limit.
			base = min(base, now)
			if now > base && now-base > limit {
				inv.rt.Interrupt(fmt.Errorf("%s hook allocated more than %d MiB (max_hook_memory); keep large data in workspace files, not in script memory: %w",
					inv.hook, limit>>20, ErrHeapLimit))
				return
			}
		}
	}()
	return func() { close(done) }
}
