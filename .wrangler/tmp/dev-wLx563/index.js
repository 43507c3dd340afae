var __defProp = Object.defineProperty;
var __name = (target, value) => __defProp(target, "name", { value, configurable: true });

// build/index.js
import { WorkerEntrypoint as ke } from "cloudflare:workers";
import Z from "./416fd562e37b4669ee8dcf6bc53a139af822a290-index_bg.wasm";
var K = globalThis.__worker_init_state = { criticalError: false, instanceId: 0 };
var x = class {
  static {
    __name(this, "x");
  }
  __destroy_into_raw() {
    let e = this.__wbg_ptr;
    return this.__wbg_ptr = 0, ge.unregister(this), e;
  }
  free() {
    let e = this.__destroy_into_raw();
    s();
    try {
      i.__wbg_containerstartupoptions_free(e, 0);
    } catch (t) {
      o(t);
    }
  }
  get enableInternet() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e;
    s();
    try {
      e = i.__wbg_get_containerstartupoptions_enableInternet(this.__wbg_ptr);
    } catch (t) {
      o(t);
    }
    return e === 16777215 ? void 0 : e !== 0;
  }
  get entrypoint() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e;
    s();
    try {
      e = i.__wbg_get_containerstartupoptions_entrypoint(this.__wbg_ptr);
    } catch (n) {
      o(n);
    }
    var t = ve(e[0], e[1]);
    return i.__wbindgen_free(e[0], e[1] * 4, 4), t;
  }
  get env() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e;
    s();
    try {
      e = i.__wbg_get_containerstartupoptions_env(this.__wbg_ptr);
    } catch (t) {
      o(t);
    }
    return e;
  }
  set enableInternet(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    s();
    try {
      i.__wbg_set_containerstartupoptions_enableInternet(this.__wbg_ptr, f(e) ? 16777215 : e ? 1 : 0);
    } catch (t) {
      o(t);
    }
  }
  set entrypoint(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let t = Ie(e, i.__wbindgen_malloc), n = w;
    s();
    try {
      i.__wbg_set_containerstartupoptions_entrypoint(this.__wbg_ptr, t, n);
    } catch (_) {
      o(_);
    }
  }
  set env(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    s();
    try {
      i.__wbg_set_containerstartupoptions_env(this.__wbg_ptr, e);
    } catch (t) {
      o(t);
    }
  }
};
Symbol.dispose && (x.prototype[Symbol.dispose] = x.prototype.free);
var M = class {
  static {
    __name(this, "M");
  }
  __destroy_into_raw() {
    let e = this.__wbg_ptr;
    return this.__wbg_ptr = 0, he.unregister(this), e;
  }
  free() {
    let e = this.__destroy_into_raw();
    s();
    try {
      i.__wbg_intounderlyingbytesource_free(e, 0);
    } catch (t) {
      o(t);
    }
  }
  get autoAllocateChunkSize() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e;
    s();
    try {
      e = i.intounderlyingbytesource_autoAllocateChunkSize(this.__wbg_ptr);
    } catch (t) {
      o(t);
    }
    return e >>> 0;
  }
  cancel() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e = this.__destroy_into_raw();
    s();
    try {
      i.intounderlyingbytesource_cancel(e);
    } catch (t) {
      o(t);
    }
  }
  pull(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let t;
    s();
    try {
      t = i.intounderlyingbytesource_pull(this.__wbg_ptr, e);
    } catch (n) {
      o(n);
    }
    return t;
  }
  start(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    s();
    try {
      i.intounderlyingbytesource_start(this.__wbg_ptr, e);
    } catch (t) {
      o(t);
    }
  }
  get type() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e;
    s();
    try {
      e = i.intounderlyingbytesource_type(this.__wbg_ptr);
    } catch (t) {
      o(t);
    }
    return de[e];
  }
};
Symbol.dispose && (M.prototype[Symbol.dispose] = M.prototype.free);
var C = class {
  static {
    __name(this, "C");
  }
  __destroy_into_raw() {
    let e = this.__wbg_ptr;
    return this.__wbg_ptr = 0, pe.unregister(this), e;
  }
  free() {
    let e = this.__destroy_into_raw();
    s();
    try {
      i.__wbg_intounderlyingsink_free(e, 0);
    } catch (t) {
      o(t);
    }
  }
  abort(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let t = this.__destroy_into_raw(), n;
    s();
    try {
      n = i.intounderlyingsink_abort(t, e);
    } catch (_) {
      o(_);
    }
    return n;
  }
  close() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e = this.__destroy_into_raw(), t;
    s();
    try {
      t = i.intounderlyingsink_close(e);
    } catch (n) {
      o(n);
    }
    return t;
  }
  write(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let t;
    s();
    try {
      t = i.intounderlyingsink_write(this.__wbg_ptr, e);
    } catch (n) {
      o(n);
    }
    return t;
  }
};
Symbol.dispose && (C.prototype[Symbol.dispose] = C.prototype.free);
var q = class {
  static {
    __name(this, "q");
  }
  __destroy_into_raw() {
    let e = this.__wbg_ptr;
    return this.__wbg_ptr = 0, ye.unregister(this), e;
  }
  free() {
    let e = this.__destroy_into_raw();
    s();
    try {
      i.__wbg_intounderlyingsource_free(e, 0);
    } catch (t) {
      o(t);
    }
  }
  cancel() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e = this.__destroy_into_raw();
    s();
    try {
      i.intounderlyingsource_cancel(e);
    } catch (t) {
      o(t);
    }
  }
  pull(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let t;
    s();
    try {
      t = i.intounderlyingsource_pull(this.__wbg_ptr, e);
    } catch (n) {
      o(n);
    }
    return t;
  }
};
Symbol.dispose && (q.prototype[Symbol.dispose] = q.prototype.free);
var E = class r {
  static {
    __name(this, "r");
  }
  static __wrap(e) {
    let t = Object.create(r.prototype);
    return t.__wbg_ptr = e, Object.defineProperty(t, "__wbg_inst", { value: c, writable: true }), Q.register(t, { ptr: e, instance: c }, t), t;
  }
  __destroy_into_raw() {
    let e = this.__wbg_ptr;
    return this.__wbg_ptr = 0, Q.unregister(this), e;
  }
  free() {
    let e = this.__destroy_into_raw();
    s();
    try {
      i.__wbg_minifyconfig_free(e, 0);
    } catch (t) {
      o(t);
    }
  }
  get css() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e;
    s();
    try {
      e = i.__wbg_get_minifyconfig_css(this.__wbg_ptr);
    } catch (t) {
      o(t);
    }
    return e !== 0;
  }
  get html() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e;
    s();
    try {
      e = i.__wbg_get_minifyconfig_html(this.__wbg_ptr);
    } catch (t) {
      o(t);
    }
    return e !== 0;
  }
  get js() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e;
    s();
    try {
      e = i.__wbg_get_minifyconfig_js(this.__wbg_ptr);
    } catch (t) {
      o(t);
    }
    return e !== 0;
  }
  set css(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    s();
    try {
      i.__wbg_set_minifyconfig_css(this.__wbg_ptr, e);
    } catch (t) {
      o(t);
    }
  }
  set html(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    s();
    try {
      i.__wbg_set_minifyconfig_html(this.__wbg_ptr, e);
    } catch (t) {
      o(t);
    }
  }
  set js(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    s();
    try {
      i.__wbg_set_minifyconfig_js(this.__wbg_ptr, e);
    } catch (t) {
      o(t);
    }
  }
};
Symbol.dispose && (E.prototype[Symbol.dispose] = E.prototype.free);
var k = class {
  static {
    __name(this, "k");
  }
  __destroy_into_raw() {
    let e = this.__wbg_ptr;
    return this.__wbg_ptr = 0, me.unregister(this), e;
  }
  free() {
    let e = this.__destroy_into_raw();
    s();
    try {
      i.__wbg_r2range_free(e, 0);
    } catch (t) {
      o(t);
    }
  }
  get length() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e;
    s();
    try {
      e = i.__wbg_get_r2range_length(this.__wbg_ptr);
    } catch (t) {
      o(t);
    }
    return e[0] === 0 ? void 0 : e[1];
  }
  get offset() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e;
    s();
    try {
      e = i.__wbg_get_r2range_offset(this.__wbg_ptr);
    } catch (t) {
      o(t);
    }
    return e[0] === 0 ? void 0 : e[1];
  }
  get suffix() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e;
    s();
    try {
      e = i.__wbg_get_r2range_suffix(this.__wbg_ptr);
    } catch (t) {
      o(t);
    }
    return e[0] === 0 ? void 0 : e[1];
  }
  set length(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    s();
    try {
      i.__wbg_set_r2range_length(this.__wbg_ptr, !f(e), f(e) ? 0 : e);
    } catch (t) {
      o(t);
    }
  }
  set offset(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    s();
    try {
      i.__wbg_set_r2range_offset(this.__wbg_ptr, !f(e), f(e) ? 0 : e);
    } catch (t) {
      o(t);
    }
  }
  set suffix(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    s();
    try {
      i.__wbg_set_r2range_suffix(this.__wbg_ptr, !f(e), f(e) ? 0 : e);
    } catch (t) {
      o(t);
    }
  }
};
Symbol.dispose && (k.prototype[Symbol.dispose] = k.prototype.free);
var R = class r2 {
  static {
    __name(this, "r");
  }
  static __wrap(e) {
    let t = Object.create(r2.prototype);
    return t.__wbg_ptr = e, Object.defineProperty(t, "__wbg_inst", { value: c, writable: true }), X.register(t, { ptr: e, instance: c }, t), t;
  }
  __destroy_into_raw() {
    let e = this.__wbg_ptr;
    return this.__wbg_ptr = 0, X.unregister(this), e;
  }
  free() {
    let e = this.__destroy_into_raw();
    s();
    try {
      i.__wbg_rawlocks_free(e, 0);
    } catch (t) {
      o(t);
    }
  }
  acquire(e, t, n, _, a) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let u = +t, b = +(f(n) ? 0 : n), h = +(f(_) ? 0 : _), j = y(e, i.__wbindgen_malloc, i.__wbindgen_realloc), F = w, m;
    s();
    try {
      m = i.rawlocks_acquire(this.__wbg_ptr, j, F, u, !f(n), b, !f(_), h, f(a) ? 0 : g(a));
    } catch (se) {
      o(se);
    }
    if (m[2]) throw d(m[1]);
    return d(m[0]);
  }
  backend() {
    let e, t;
    try {
      if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
      let n;
      s();
      try {
        n = i.rawlocks_backend(this.__wbg_ptr);
      } catch (_) {
        o(_);
      }
      return e = n[0], t = n[1], p(n[0], n[1]);
    } finally {
      s();
      try {
        i.__wbindgen_free(e, t, 1);
      } catch (n) {
        o(n);
      }
    }
  }
  close() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e;
    s();
    try {
      e = i.rawlocks_close(this.__wbg_ptr);
    } catch (t) {
      o(t);
    }
    if (e[2]) throw d(e[1]);
    return d(e[0]);
  }
  static etcd(e, t) {
    let n = y(e, i.__wbindgen_malloc, i.__wbindgen_realloc), _ = w, a;
    s();
    try {
      a = i.rawlocks_etcd(n, _, f(t) ? 0 : g(t));
    } catch (u) {
      o(u);
    }
    if (a[2]) throw d(a[1]);
    return r2.__wrap(a[0]);
  }
  extend(e, t) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let n;
    s();
    try {
      n = i.rawlocks_extend(this.__wbg_ptr, e, !f(t), f(t) ? 0 : t);
    } catch (_) {
      o(_);
    }
    if (n[2]) throw d(n[1]);
    return d(n[0]);
  }
  inspect(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let t = y(e, i.__wbindgen_malloc, i.__wbindgen_realloc), n = w, _;
    s();
    try {
      _ = i.rawlocks_inspect(this.__wbg_ptr, t, n);
    } catch (a) {
      o(a);
    }
    if (_[2]) throw d(_[1]);
    return d(_[0]);
  }
  liveCount() {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let e;
    s();
    try {
      e = i.rawlocks_liveCount(this.__wbg_ptr);
    } catch (t) {
      o(t);
    }
    return e >>> 0;
  }
  onLockEvent(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    s();
    try {
      i.rawlocks_onLockEvent(this.__wbg_ptr, e);
    } catch (t) {
      o(t);
    }
  }
  static redis(e, t) {
    let n = y(e, i.__wbindgen_malloc, i.__wbindgen_realloc), _ = w, a;
    s();
    try {
      a = i.rawlocks_redis(n, _, f(t) ? 0 : g(t));
    } catch (u) {
      o(u);
    }
    if (a[2]) throw d(a[1]);
    return r2.__wrap(a[0]);
  }
  static redlock(e, t) {
    let n = y(e, i.__wbindgen_malloc, i.__wbindgen_realloc), _ = w, a;
    s();
    try {
      a = i.rawlocks_redlock(n, _, f(t) ? 0 : g(t));
    } catch (u) {
      o(u);
    }
    if (a[2]) throw d(a[1]);
    return r2.__wrap(a[0]);
  }
  release(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let t;
    s();
    try {
      t = i.rawlocks_release(this.__wbg_ptr, e);
    } catch (n) {
      o(n);
    }
    if (t[2]) throw d(t[1]);
    return d(t[0]);
  }
  resume(e) {
    if (this.__wbg_inst !== void 0 && this.__wbg_inst !== c) throw new Error("Invalid stale object from previous Wasm instance");
    let t = y(e, i.__wbindgen_malloc, i.__wbindgen_realloc), n = w, _;
    s();
    try {
      _ = i.rawlocks_resume(this.__wbg_ptr, t, n);
    } catch (a) {
      o(a);
    }
    if (_[2]) throw d(_[1]);
    return d(_[0]);
  }
};
Symbol.dispose && (R.prototype[Symbol.dispose] = R.prototype.free);
function U() {
  c++, I = null, W = null, S = null, typeof numBytesDecoded < "u" && (numBytesDecoded = 0), typeof w < "u" && (w = 0), $ = false, D = false, V = new WebAssembly.Instance(Z, re()), i = V.exports, i.__wbindgen_start();
}
__name(U, "U");
function ee() {
  let r3;
  s();
  try {
    r3 = i.__worker_init_state();
  } catch (e) {
    o(e);
  }
  return r3;
}
__name(ee, "ee");
function te(r3, e, t) {
  let n;
  s();
  try {
    n = i.fetch(r3, e, t);
  } catch (_) {
    o(_);
  }
  return n;
}
__name(te, "te");
function ne(r3, e, t) {
  let n;
  s();
  try {
    n = i.scheduled(r3, e, t);
  } catch (_) {
    o(_);
  }
  return n;
}
__name(ne, "ne");
function re() {
  return { __proto__: null, "./index_bg.js": { __proto__: null, __wbg_Error_208446807d0d1e30: /* @__PURE__ */ __name(function(e, t) {
    return Error(p(e, t));
  }, "__wbg_Error_208446807d0d1e30"), __wbg_String_8564e559799eccda: /* @__PURE__ */ __name(function(e, t) {
    let n = String(t), _ = y(n, i.__wbindgen_malloc, i.__wbindgen_realloc), a = w;
    l().setInt32((e >>> 0) + 4, a, true), l().setInt32((e >>> 0) + 0, _, true);
  }, "__wbg_String_8564e559799eccda"), __wbg___wbindgen_boolean_get_4f1baf9a00be3c74: /* @__PURE__ */ __name(function(e) {
    let t = e, n = typeof t == "boolean" ? t : void 0;
    return f(n) ? 16777215 : n ? 1 : 0;
  }, "__wbg___wbindgen_boolean_get_4f1baf9a00be3c74"), __wbg___wbindgen_debug_string_f249a2a76caa9a55: /* @__PURE__ */ __name(function(e, t) {
    let n = ie(t), _ = y(n, i.__wbindgen_malloc, i.__wbindgen_realloc), a = w;
    l().setInt32((e >>> 0) + 4, a, true), l().setInt32((e >>> 0) + 0, _, true);
  }, "__wbg___wbindgen_debug_string_f249a2a76caa9a55"), __wbg___wbindgen_is_falsy_d864b623500ae65d: /* @__PURE__ */ __name(function(e) {
    return !e;
  }, "__wbg___wbindgen_is_falsy_d864b623500ae65d"), __wbg___wbindgen_is_function_741ff2bb612836f5: /* @__PURE__ */ __name(function(e) {
    return typeof e == "function";
  }, "__wbg___wbindgen_is_function_741ff2bb612836f5"), __wbg___wbindgen_is_null_or_undefined_fb96af93c75460ae: /* @__PURE__ */ __name(function(e) {
    return e == null;
  }, "__wbg___wbindgen_is_null_or_undefined_fb96af93c75460ae"), __wbg___wbindgen_is_object_8b968c3ab8e96595: /* @__PURE__ */ __name(function(e) {
    let t = e;
    return typeof t == "object" && t !== null;
  }, "__wbg___wbindgen_is_object_8b968c3ab8e96595"), __wbg___wbindgen_is_string_fc456fee5d3317de: /* @__PURE__ */ __name(function(e) {
    return typeof e == "string";
  }, "__wbg___wbindgen_is_string_fc456fee5d3317de"), __wbg___wbindgen_is_undefined_be5b34249ff1fc15: /* @__PURE__ */ __name(function(e) {
    return e === void 0;
  }, "__wbg___wbindgen_is_undefined_be5b34249ff1fc15"), __wbg___wbindgen_number_get_934b640d0889af78: /* @__PURE__ */ __name(function(e, t) {
    let n = t, _ = typeof n == "number" ? n : void 0;
    l().setFloat64((e >>> 0) + 8, f(_) ? 0 : _, true), l().setInt32((e >>> 0) + 0, !f(_), true);
  }, "__wbg___wbindgen_number_get_934b640d0889af78"), __wbg___wbindgen_reinit_2fe0d0b9c1cc3c21: /* @__PURE__ */ __name(function() {
    D = true;
  }, "__wbg___wbindgen_reinit_2fe0d0b9c1cc3c21"), __wbg___wbindgen_string_get_7ce8eee7fd327545: /* @__PURE__ */ __name(function(e, t) {
    let n = t, _ = typeof n == "string" ? n : void 0;
    var a = f(_) ? 0 : y(_, i.__wbindgen_malloc, i.__wbindgen_realloc), u = w;
    l().setInt32((e >>> 0) + 4, u, true), l().setInt32((e >>> 0) + 0, a, true);
  }, "__wbg___wbindgen_string_get_7ce8eee7fd327545"), __wbg___wbindgen_throw_4c88d8bf264fd984: /* @__PURE__ */ __name(function(e, t) {
    throw new WebAssembly.Exception(B, [new Error(p(e, t))]);
  }, "__wbg___wbindgen_throw_4c88d8bf264fd984"), __wbg__wbg_cb_unref_09736879a3f67559: /* @__PURE__ */ __name(function(e) {
    e._wbg_cb_unref();
  }, "__wbg__wbg_cb_unref_09736879a3f67559"), __wbg_abort_f8d1589eb0c65ee2: /* @__PURE__ */ __name(function(e) {
    e.abort();
  }, "__wbg_abort_f8d1589eb0c65ee2"), __wbg_aborted_31456edf1be00084: /* @__PURE__ */ __name(function(e) {
    return e.aborted;
  }, "__wbg_aborted_31456edf1be00084"), __wbg_addEventListener_847fd86b8c33ec43: /* @__PURE__ */ __name(function(e, t, n, _) {
    e.addEventListener(p(t, n), _);
  }, "__wbg_addEventListener_847fd86b8c33ec43"), __wbg_apply_bfe2b07b146427e2: /* @__PURE__ */ __name(function(e, t, n) {
    return e.apply(t, n);
  }, "__wbg_apply_bfe2b07b146427e2"), __wbg_arrayBuffer_39a766224696fd9d: /* @__PURE__ */ __name(function(e) {
    return e.arrayBuffer();
  }, "__wbg_arrayBuffer_39a766224696fd9d"), __wbg_body_0da01a9a056907d8: /* @__PURE__ */ __name(function(e) {
    let t = e.body;
    return f(t) ? 0 : g(t);
  }, "__wbg_body_0da01a9a056907d8"), __wbg_buffer_aca05a93c046db1a: /* @__PURE__ */ __name(function(e) {
    return e.buffer;
  }, "__wbg_buffer_aca05a93c046db1a"), __wbg_byobRequest_18280c78e462544c: /* @__PURE__ */ __name(function(e) {
    let t = e.byobRequest;
    return f(t) ? 0 : g(t);
  }, "__wbg_byobRequest_18280c78e462544c"), __wbg_byteLength_c5f3c188d5252e5b: /* @__PURE__ */ __name(function(e) {
    return e.byteLength;
  }, "__wbg_byteLength_c5f3c188d5252e5b"), __wbg_byteOffset_63cdc7b38f33a45e: /* @__PURE__ */ __name(function(e) {
    return e.byteOffset;
  }, "__wbg_byteOffset_63cdc7b38f33a45e"), __wbg_call_40b008ba32f73991: /* @__PURE__ */ __name(function(e, t) {
    return e.call(t);
  }, "__wbg_call_40b008ba32f73991"), __wbg_call_a410eb4b59ed5965: /* @__PURE__ */ __name(function(e, t, n) {
    return e.call(t, n);
  }, "__wbg_call_a410eb4b59ed5965"), __wbg_call_fc92fee6137d452d: /* @__PURE__ */ __name(function(e, t, n, _) {
    return e.call(t, n, _);
  }, "__wbg_call_fc92fee6137d452d"), __wbg_cancel_b195250778e9d8e7: /* @__PURE__ */ __name(function(e) {
    return e.cancel();
  }, "__wbg_cancel_b195250778e9d8e7"), __wbg_catch_fd4c7ea14fde9d83: /* @__PURE__ */ __name(function(e, t) {
    return e.catch(t);
  }, "__wbg_catch_fd4c7ea14fde9d83"), __wbg_cause_4cdda1b55a30b227: /* @__PURE__ */ __name(function(e) {
    return e.cause;
  }, "__wbg_cause_4cdda1b55a30b227"), __wbg_cf_3eef96d446a499c0: /* @__PURE__ */ __name(function(e) {
    let t = e.cf;
    return f(t) ? 0 : g(t);
  }, "__wbg_cf_3eef96d446a499c0"), __wbg_cf_e4bf1d08e9961dec: /* @__PURE__ */ __name(function(e) {
    let t = e.cf;
    return f(t) ? 0 : g(t);
  }, "__wbg_cf_e4bf1d08e9961dec"), __wbg_clearTimeout_d859c3fbfd863ce7: /* @__PURE__ */ __name(function(e, t) {
    e.clearTimeout(t);
  }, "__wbg_clearTimeout_d859c3fbfd863ce7"), __wbg_close_294d3f727cb7a844: /* @__PURE__ */ __name(function(e) {
    e.close();
  }, "__wbg_close_294d3f727cb7a844"), __wbg_close_bf94aa7e38b9a94b: /* @__PURE__ */ __name(function(e) {
    e.close();
  }, "__wbg_close_bf94aa7e38b9a94b"), __wbg_cron_011257069251b860: /* @__PURE__ */ __name(function(e, t) {
    let n = t.cron, _ = y(n, i.__wbindgen_malloc, i.__wbindgen_realloc), a = w;
    l().setInt32((e >>> 0) + 4, a, true), l().setInt32((e >>> 0) + 0, _, true);
  }, "__wbg_cron_011257069251b860"), __wbg_crypto_23f565a907d30078: /* @__PURE__ */ __name(function(e) {
    return e.crypto;
  }, "__wbg_crypto_23f565a907d30078"), __wbg_done_57e08d0be6e30c02: /* @__PURE__ */ __name(function(e) {
    return e.done;
  }, "__wbg_done_57e08d0be6e30c02"), __wbg_enqueue_c11626eae1c54509: /* @__PURE__ */ __name(function(e, t) {
    e.enqueue(t);
  }, "__wbg_enqueue_c11626eae1c54509"), __wbg_error_9b95f63d905893d2: /* @__PURE__ */ __name(function(e, t) {
    console.error(e, t);
  }, "__wbg_error_9b95f63d905893d2"), __wbg_error_d1fc0193610e0e39: /* @__PURE__ */ __name(function(e) {
    console.error(e);
  }, "__wbg_error_d1fc0193610e0e39"), __wbg_fetch_8991a6a8ea67c83b: /* @__PURE__ */ __name(function(e, t, n, _) {
    return e.fetch(p(t, n), _);
  }, "__wbg_fetch_8991a6a8ea67c83b"), __wbg_fetch_a416b432a33cc077: /* @__PURE__ */ __name(function(e, t, n) {
    return e.fetch(t, n);
  }, "__wbg_fetch_a416b432a33cc077"), __wbg_getRandomValues_d2908e0b99612b91: /* @__PURE__ */ __name(function(e, t) {
    e.getRandomValues(t);
  }, "__wbg_getRandomValues_d2908e0b99612b91"), __wbg_getReader_3b3096cf504fce5e: /* @__PURE__ */ __name(function(e) {
    return e.getReader();
  }, "__wbg_getReader_3b3096cf504fce5e"), __wbg_get_0ae635d02d232017: /* @__PURE__ */ __name(function(e, t) {
    let n = Reflect.get(e, t);
    return f(n) ? 0 : g(n);
  }, "__wbg_get_0ae635d02d232017"), __wbg_get_2080c49015e35254: /* @__PURE__ */ __name(function(e, t) {
    return Reflect.get(e, t);
  }, "__wbg_get_2080c49015e35254"), __wbg_get_done_3bf2b4a34e149301: /* @__PURE__ */ __name(function(e) {
    let t = e.done;
    return f(t) ? 16777215 : t ? 1 : 0;
  }, "__wbg_get_done_3bf2b4a34e149301"), __wbg_get_value_9454480da7066d61: /* @__PURE__ */ __name(function(e) {
    return e.value;
  }, "__wbg_get_value_9454480da7066d61"), __wbg_headers_5fc0106c076eb731: /* @__PURE__ */ __name(function(e) {
    return e.headers;
  }, "__wbg_headers_5fc0106c076eb731"), __wbg_headers_9ef80dd266706f48: /* @__PURE__ */ __name(function(e) {
    return e.headers;
  }, "__wbg_headers_9ef80dd266706f48"), __wbg_instanceId_65a51bedfd10160a: /* @__PURE__ */ __name(function(e) {
    return e.instanceId;
  }, "__wbg_instanceId_65a51bedfd10160a"), __wbg_instanceof_Error_74e3cca0c4a69161: /* @__PURE__ */ __name(function(e) {
    let t;
    try {
      t = e instanceof Error;
    } catch {
      t = false;
    }
    return t;
  }, "__wbg_instanceof_Error_74e3cca0c4a69161"), __wbg_instanceof_ReadableStream_ac28304925ec0f96: /* @__PURE__ */ __name(function(e) {
    let t;
    try {
      t = e instanceof ReadableStream;
    } catch {
      t = false;
    }
    return t;
  }, "__wbg_instanceof_ReadableStream_ac28304925ec0f96"), __wbg_instanceof_Response_5b0b4f7f1daeae51: /* @__PURE__ */ __name(function(e) {
    let t;
    try {
      t = e instanceof Response;
    } catch {
      t = false;
    }
    return t;
  }, "__wbg_instanceof_Response_5b0b4f7f1daeae51"), __wbg_instanceof_Uint8Array_d7aeb0dcb3108fea: /* @__PURE__ */ __name(function(e) {
    let t;
    try {
      t = e instanceof Uint8Array;
    } catch {
      t = false;
    }
    return t;
  }, "__wbg_instanceof_Uint8Array_d7aeb0dcb3108fea"), __wbg_keys_296846770c088f87: /* @__PURE__ */ __name(function(e) {
    return e.keys();
  }, "__wbg_keys_296846770c088f87"), __wbg_length_186163212ffe79c3: /* @__PURE__ */ __name(function(e) {
    return e.length;
  }, "__wbg_length_186163212ffe79c3"), __wbg_log_ff86bbb34c295e21: /* @__PURE__ */ __name(function(e) {
    console.log(e);
  }, "__wbg_log_ff86bbb34c295e21"), __wbg_message_43d8c8f1d543a349: /* @__PURE__ */ __name(function(e) {
    return e.message;
  }, "__wbg_message_43d8c8f1d543a349"), __wbg_method_3d406ebab4dd9853: /* @__PURE__ */ __name(function(e, t) {
    let n = t.method, _ = y(n, i.__wbindgen_malloc, i.__wbindgen_realloc), a = w;
    l().setInt32((e >>> 0) + 4, a, true), l().setInt32((e >>> 0) + 0, _, true);
  }, "__wbg_method_3d406ebab4dd9853"), __wbg_minifyconfig_new: /* @__PURE__ */ __name(function(e) {
    return E.__wrap(e);
  }, "__wbg_minifyconfig_new"), __wbg_msCrypto_d5f06fad6bf1409b: /* @__PURE__ */ __name(function(e) {
    return e.msCrypto;
  }, "__wbg_msCrypto_d5f06fad6bf1409b"), __wbg_name_d1fa514fdca6a975: /* @__PURE__ */ __name(function(e) {
    return e.name;
  }, "__wbg_name_d1fa514fdca6a975"), __wbg_new_13de428334042d26: /* @__PURE__ */ __name(function(e) {
    return new Uint8Array(e);
  }, "__wbg_new_13de428334042d26"), __wbg_new_277c27c26f94cbc2: /* @__PURE__ */ __name(function() {
    return new Headers();
  }, "__wbg_new_277c27c26f94cbc2"), __wbg_new_37eb45aaf5eeb820: /* @__PURE__ */ __name(function() {
    return new Array();
  }, "__wbg_new_37eb45aaf5eeb820"), __wbg_new_5f28518387ad0e34: /* @__PURE__ */ __name(function() {
    return new AbortController();
  }, "__wbg_new_5f28518387ad0e34"), __wbg_new_7075786089b89c5e: /* @__PURE__ */ __name(function() {
    return /* @__PURE__ */ new Map();
  }, "__wbg_new_7075786089b89c5e"), __wbg_new_787b9fb330d55d78: /* @__PURE__ */ __name(function(e, t) {
    return new Error(p(e, t));
  }, "__wbg_new_787b9fb330d55d78"), __wbg_new_cd4348290afae586: /* @__PURE__ */ __name(function() {
    return new Object();
  }, "__wbg_new_cd4348290afae586"), __wbg_new_from_slice_b8daf545a41c6aa0: /* @__PURE__ */ __name(function(e, t) {
    return new Uint8Array(L(e, t));
  }, "__wbg_new_from_slice_b8daf545a41c6aa0"), __wbg_new_typed_e09da9dae6ee5935: /* @__PURE__ */ __name(function(e, t) {
    try {
      var n = { a: e, b: t }, _ = /* @__PURE__ */ __name((u, b) => {
        let h = n.a;
        n.a = 0;
        try {
          return ue(h, n.b, u, b);
        } finally {
          n.a = h;
        }
      }, "_");
      return new Promise(_);
    } finally {
      n.a = 0;
    }
  }, "__wbg_new_typed_e09da9dae6ee5935"), __wbg_new_with_byte_offset_and_length_3cd32055a417f095: /* @__PURE__ */ __name(function(e, t, n) {
    return new Uint8Array(e, t >>> 0, n >>> 0);
  }, "__wbg_new_with_byte_offset_and_length_3cd32055a417f095"), __wbg_new_with_length_01b143a7e5dd5a3e: /* @__PURE__ */ __name(function(e) {
    return new Uint8Array(e >>> 0);
  }, "__wbg_new_with_length_01b143a7e5dd5a3e"), __wbg_new_with_opt_buffer_source_and_init_efb63b64b37a12c7: /* @__PURE__ */ __name(function(e, t) {
    return new Response(e, t);
  }, "__wbg_new_with_opt_buffer_source_and_init_efb63b64b37a12c7"), __wbg_new_with_opt_readable_stream_and_init_383c64eccf9e9cc7: /* @__PURE__ */ __name(function(e, t) {
    return new Response(e, t);
  }, "__wbg_new_with_opt_readable_stream_and_init_383c64eccf9e9cc7"), __wbg_new_with_opt_str_and_init_6456bed24baae6fc: /* @__PURE__ */ __name(function(e, t, n) {
    return new Response(e === 0 ? void 0 : p(e, t), n);
  }, "__wbg_new_with_opt_str_and_init_6456bed24baae6fc"), __wbg_new_with_str_and_init_d9f6b5611184e16b: /* @__PURE__ */ __name(function(e, t, n) {
    return new Request(p(e, t), n);
  }, "__wbg_new_with_str_and_init_d9f6b5611184e16b"), __wbg_next_af5ac6a08bb0a717: /* @__PURE__ */ __name(function(e) {
    return e.next();
  }, "__wbg_next_af5ac6a08bb0a717"), __wbg_node_86166ff8ce1f2002: /* @__PURE__ */ __name(function(e) {
    return e.node;
  }, "__wbg_node_86166ff8ce1f2002"), __wbg_now_463ac581d2fc7ea3: /* @__PURE__ */ __name(function() {
    return Date.now();
  }, "__wbg_now_463ac581d2fc7ea3"), __wbg_of_41bbc931cc6fa107: /* @__PURE__ */ __name(function(e, t, n, _) {
    return Array.of(e, t, n, _);
  }, "__wbg_of_41bbc931cc6fa107"), __wbg_process_91f425a63f58e399: /* @__PURE__ */ __name(function(e) {
    return e.process;
  }, "__wbg_process_91f425a63f58e399"), __wbg_prototypesetcall_13162965d1fe7aa3: /* @__PURE__ */ __name(function(e, t, n) {
    Uint8Array.prototype.set.call(L(e, t), n);
  }, "__wbg_prototypesetcall_13162965d1fe7aa3"), __wbg_push_c9f4893fc209f768: /* @__PURE__ */ __name(function(e, t) {
    return e.push(t);
  }, "__wbg_push_c9f4893fc209f768"), __wbg_queueMicrotask_1e8503a8a690f0a3: /* @__PURE__ */ __name(function(e) {
    return e.queueMicrotask;
  }, "__wbg_queueMicrotask_1e8503a8a690f0a3"), __wbg_queueMicrotask_4a1a4d8dd332373b: /* @__PURE__ */ __name(function(e) {
    queueMicrotask(e);
  }, "__wbg_queueMicrotask_4a1a4d8dd332373b"), __wbg_randomFillSync_34b023059e3363de: /* @__PURE__ */ __name(function(e, t) {
    e.randomFillSync(t);
  }, "__wbg_randomFillSync_34b023059e3363de"), __wbg_random_df36b90cd78a7d54: /* @__PURE__ */ __name(function() {
    return Math.random();
  }, "__wbg_random_df36b90cd78a7d54"), __wbg_read_e3bea75dace70752: /* @__PURE__ */ __name(function(e) {
    return e.read();
  }, "__wbg_read_e3bea75dace70752"), __wbg_releaseLock_eddf1401c763f0b9: /* @__PURE__ */ __name(function(e) {
    e.releaseLock();
  }, "__wbg_releaseLock_eddf1401c763f0b9"), __wbg_removeEventListener_4e20bd5fac3de092: /* @__PURE__ */ __name(function(e, t, n, _) {
    e.removeEventListener(p(t, n), _);
  }, "__wbg_removeEventListener_4e20bd5fac3de092"), __wbg_require_9a7d8cc2e1d275c0: /* @__PURE__ */ __name(function() {
    return module.require;
  }, "__wbg_require_9a7d8cc2e1d275c0"), __wbg_resolve_dbf78ab4942478b0: /* @__PURE__ */ __name(function(e) {
    return Promise.resolve(e);
  }, "__wbg_resolve_dbf78ab4942478b0"), __wbg_respond_d97c023ee981d1f5: /* @__PURE__ */ __name(function(e, t) {
    e.respond(t >>> 0);
  }, "__wbg_respond_d97c023ee981d1f5"), __wbg_setTimeout_7b54aa5f72cd7066: /* @__PURE__ */ __name(function(e, t, n) {
    return e.setTimeout(t, n);
  }, "__wbg_setTimeout_7b54aa5f72cd7066"), __wbg_set_2793479888329cb6: /* @__PURE__ */ __name(function(e, t, n) {
    return Reflect.set(e, t, n);
  }, "__wbg_set_2793479888329cb6"), __wbg_set_8282f7e0d2d01336: /* @__PURE__ */ __name(function(e, t, n) {
    return e.set(t, n);
  }, "__wbg_set_8282f7e0d2d01336"), __wbg_set_bcb0ec2400cfa22e: /* @__PURE__ */ __name(function(e, t, n, _, a) {
    e.set(p(t, n), p(_, a));
  }, "__wbg_set_bcb0ec2400cfa22e"), __wbg_set_body_877d5251e78ca815: /* @__PURE__ */ __name(function(e, t) {
    e.body = t;
  }, "__wbg_set_body_877d5251e78ca815"), __wbg_set_cache_7a23201e29cbd632: /* @__PURE__ */ __name(function(e, t) {
    e.cache = we[t];
  }, "__wbg_set_cache_7a23201e29cbd632"), __wbg_set_criticalError_c30445da7038dbf2: /* @__PURE__ */ __name(function(e, t) {
    e.criticalError = t !== 0;
  }, "__wbg_set_criticalError_c30445da7038dbf2"), __wbg_set_e4b9a833d288759a: /* @__PURE__ */ __name(function(e, t, n) {
    e[t] = n;
  }, "__wbg_set_e4b9a833d288759a"), __wbg_set_feb3714f475485ba: /* @__PURE__ */ __name(function(e, t, n) {
    e.set(L(t, n));
  }, "__wbg_set_feb3714f475485ba"), __wbg_set_headers_07f10dbe49bc0e77: /* @__PURE__ */ __name(function(e, t) {
    e.headers = t;
  }, "__wbg_set_headers_07f10dbe49bc0e77"), __wbg_set_headers_6d75a7df4eb22716: /* @__PURE__ */ __name(function(e, t) {
    e.headers = t;
  }, "__wbg_set_headers_6d75a7df4eb22716"), __wbg_set_instanceId_6f5f77d81e249b49: /* @__PURE__ */ __name(function(e, t) {
    e.instanceId = t >>> 0;
  }, "__wbg_set_instanceId_6f5f77d81e249b49"), __wbg_set_method_639e69af35614d36: /* @__PURE__ */ __name(function(e, t, n) {
    e.method = p(t, n);
  }, "__wbg_set_method_639e69af35614d36"), __wbg_set_redirect_a95a432ab7d10765: /* @__PURE__ */ __name(function(e, t) {
    e.redirect = le[t];
  }, "__wbg_set_redirect_a95a432ab7d10765"), __wbg_set_signal_0b2eee78907e5ba7: /* @__PURE__ */ __name(function(e, t) {
    e.signal = t;
  }, "__wbg_set_signal_0b2eee78907e5ba7"), __wbg_set_status_bd9dc81d1c17b108: /* @__PURE__ */ __name(function(e, t) {
    e.status = t;
  }, "__wbg_set_status_bd9dc81d1c17b108"), __wbg_signal_fac908876f45725d: /* @__PURE__ */ __name(function(e) {
    return e.signal;
  }, "__wbg_signal_fac908876f45725d"), __wbg_static_accessor_GLOBAL_THIS_003ee833af9699fc: /* @__PURE__ */ __name(function() {
    let e = typeof globalThis > "u" ? void 0 : globalThis;
    return f(e) ? 0 : g(e);
  }, "__wbg_static_accessor_GLOBAL_THIS_003ee833af9699fc"), __wbg_static_accessor_GLOBAL_e4293fb22cbe77da: /* @__PURE__ */ __name(function() {
    let e = typeof global > "u" ? void 0 : global;
    return f(e) ? 0 : g(e);
  }, "__wbg_static_accessor_GLOBAL_e4293fb22cbe77da"), __wbg_static_accessor_INIT_STATE_b2269150d11f01e0: /* @__PURE__ */ __name(function() {
    return K;
  }, "__wbg_static_accessor_INIT_STATE_b2269150d11f01e0"), __wbg_static_accessor_SELF_53bb20457401453d: /* @__PURE__ */ __name(function() {
    let e = typeof self > "u" ? void 0 : self;
    return f(e) ? 0 : g(e);
  }, "__wbg_static_accessor_SELF_53bb20457401453d"), __wbg_static_accessor_WINDOW_b5e0810bfecb7feb: /* @__PURE__ */ __name(function() {
    let e = typeof window > "u" ? void 0 : window;
    return f(e) ? 0 : g(e);
  }, "__wbg_static_accessor_WINDOW_b5e0810bfecb7feb"), __wbg_status_cb85b6c8d1769fa1: /* @__PURE__ */ __name(function(e) {
    return e.status;
  }, "__wbg_status_cb85b6c8d1769fa1"), __wbg_subarray_58f388a9247ac0bb: /* @__PURE__ */ __name(function(e, t, n) {
    return e.subarray(t >>> 0, n >>> 0);
  }, "__wbg_subarray_58f388a9247ac0bb"), __wbg_then_656f253a5dd7d8ea: /* @__PURE__ */ __name(function(e, t, n) {
    return e.then(t, n);
  }, "__wbg_then_656f253a5dd7d8ea"), __wbg_then_e3f7f2d365708be8: /* @__PURE__ */ __name(function(e, t) {
    return e.then(t);
  }, "__wbg_then_e3f7f2d365708be8"), __wbg_url_1be993c7b186415b: /* @__PURE__ */ __name(function(e, t) {
    let n = t.url, _ = y(n, i.__wbindgen_malloc, i.__wbindgen_realloc), a = w;
    l().setInt32((e >>> 0) + 4, a, true), l().setInt32((e >>> 0) + 0, _, true);
  }, "__wbg_url_1be993c7b186415b"), __wbg_value_e0f328965e184931: /* @__PURE__ */ __name(function(e) {
    return e.value;
  }, "__wbg_value_e0f328965e184931"), __wbg_versions_6e128a981b0df859: /* @__PURE__ */ __name(function(e) {
    return e.versions;
  }, "__wbg_versions_6e128a981b0df859"), __wbg_view_3b708d3bdaf3fc96: /* @__PURE__ */ __name(function(e) {
    let t = e.view;
    return f(t) ? 0 : g(t);
  }, "__wbg_view_3b708d3bdaf3fc96"), __wbg_webSocket_71791e807603b1e4: /* @__PURE__ */ __name(function(e) {
    let t = e.webSocket;
    return f(t) ? 0 : g(t);
  }, "__wbg_webSocket_71791e807603b1e4"), __wbindgen_generic_0000000000000001: /* @__PURE__ */ __name(function(e, t) {
    return P(e, t, be);
  }, "__wbindgen_generic_0000000000000001"), __wbindgen_generic_0000000000000002: /* @__PURE__ */ __name(function(e, t) {
    return P(e, t, ae);
  }, "__wbindgen_generic_0000000000000002"), __wbindgen_generic_0000000000000003: /* @__PURE__ */ __name(function(e, t) {
    return P(e, t, fe);
  }, "__wbindgen_generic_0000000000000003"), __wbindgen_generic_0000000000000004: /* @__PURE__ */ __name(function(e, t) {
    return P(e, t, ce);
  }, "__wbindgen_generic_0000000000000004"), __wbindgen_generic_0000000000000005: /* @__PURE__ */ __name(function(e) {
    return e;
  }, "__wbindgen_generic_0000000000000005"), __wbindgen_generic_0000000000000006: /* @__PURE__ */ __name(function(e, t) {
    return L(e, t);
  }, "__wbindgen_generic_0000000000000006"), __wbindgen_generic_0000000000000007: /* @__PURE__ */ __name(function(e, t) {
    return p(e, t);
  }, "__wbindgen_generic_0000000000000007"), __wbindgen_generic_0000000000000008: /* @__PURE__ */ __name(function(e) {
    return BigInt.asUintN(64, e);
  }, "__wbindgen_generic_0000000000000008"), __wbindgen_init_externref_table: /* @__PURE__ */ __name(function() {
    let e = i.__wbindgen_externrefs;
    e.set(0, void 0), e.set(1024, void 0), e.set(1025, null), e.set(1026, true), e.set(1027, false);
  }, "__wbindgen_init_externref_table"), __wbindgen_jstag: WebAssembly.JSTag, __wbindgen_rethrow_critical: /* @__PURE__ */ __name(function(e) {
    throw new Error("Critical error", { cause: e });
  }, "__wbindgen_rethrow_critical") } };
}
__name(re, "re");
var B = new WebAssembly.Tag({ parameters: ["externref"] });
var N;
var $ = false;
function _e() {
  $ = true;
  try {
    let r3 = J()[i.__abort_handler.value / 4];
    r3 && i.__wbindgen_export.get(r3)();
  } catch {
  }
}
__name(_e, "_e");
function o(r3) {
  throw r3 instanceof WebAssembly.Exception && r3.is(B) ? r3.getArg(B, 0) : (J()[N] = 1, _e(), r3);
}
__name(o, "o");
function s() {
  if (N ??= i.__instance_terminated.value / 4, J()[N]) {
    if ($ || _e(), D) {
      U();
      return;
    }
    throw new Error("Module terminated");
  } else D && U();
}
__name(s, "s");
function ce(r3, e) {
  s();
  try {
    i.wasm_bindgen__convert__closures_____invoke__h6129be5672d0fd09(r3, e);
  } catch (t) {
    o(t);
  }
}
__name(ce, "ce");
function ae(r3, e, t) {
  s();
  try {
    i.wasm_bindgen__convert__closures_____invoke__h7f3c847013354ec5(r3, e, t);
  } catch (n) {
    o(n);
  }
}
__name(ae, "ae");
function fe(r3, e, t) {
  let n;
  s();
  try {
    n = i.wasm_bindgen__convert__closures_____invoke__h41886f9000231fc9(r3, e, t);
  } catch (_) {
    o(_);
  }
  if (n[1]) throw d(n[0]);
}
__name(fe, "fe");
function ue(r3, e, t, n) {
  s();
  try {
    i.wasm_bindgen__convert__closures_____invoke__h6b0df33187d318a5(r3, e, t, n);
  } catch (_) {
    o(_);
  }
}
__name(ue, "ue");
function be(r3, e, t, n) {
  let _;
  s();
  try {
    _ = i.wasm_bindgen__convert__closures_____invoke__h6529f2d146b36dbc(r3, e, t, n);
  } catch (a) {
    o(a);
  }
  if (_[2]) throw d(_[1]);
  return d(_[0]);
}
__name(be, "be");
var de = ["bytes"];
var we = ["default", "no-store", "reload", "no-cache", "force-cache", "only-if-cached"];
var le = ["follow", "error", "manual"];
var c = 0;
var ge = typeof FinalizationRegistry > "u" ? { register: /* @__PURE__ */ __name(() => {
}, "register"), unregister: /* @__PURE__ */ __name(() => {
}, "unregister") } : new FinalizationRegistry(({ ptr: r3, instance: e }) => {
  e === c && i.__wbg_containerstartupoptions_free(r3, 1);
});
var he = typeof FinalizationRegistry > "u" ? { register: /* @__PURE__ */ __name(() => {
}, "register"), unregister: /* @__PURE__ */ __name(() => {
}, "unregister") } : new FinalizationRegistry(({ ptr: r3, instance: e }) => {
  e === c && i.__wbg_intounderlyingbytesource_free(r3, 1);
});
var pe = typeof FinalizationRegistry > "u" ? { register: /* @__PURE__ */ __name(() => {
}, "register"), unregister: /* @__PURE__ */ __name(() => {
}, "unregister") } : new FinalizationRegistry(({ ptr: r3, instance: e }) => {
  e === c && i.__wbg_intounderlyingsink_free(r3, 1);
});
var ye = typeof FinalizationRegistry > "u" ? { register: /* @__PURE__ */ __name(() => {
}, "register"), unregister: /* @__PURE__ */ __name(() => {
}, "unregister") } : new FinalizationRegistry(({ ptr: r3, instance: e }) => {
  e === c && i.__wbg_intounderlyingsource_free(r3, 1);
});
var Q = typeof FinalizationRegistry > "u" ? { register: /* @__PURE__ */ __name(() => {
}, "register"), unregister: /* @__PURE__ */ __name(() => {
}, "unregister") } : new FinalizationRegistry(({ ptr: r3, instance: e }) => {
  e === c && i.__wbg_minifyconfig_free(r3, 1);
});
var me = typeof FinalizationRegistry > "u" ? { register: /* @__PURE__ */ __name(() => {
}, "register"), unregister: /* @__PURE__ */ __name(() => {
}, "unregister") } : new FinalizationRegistry(({ ptr: r3, instance: e }) => {
  e === c && i.__wbg_r2range_free(r3, 1);
});
var X = typeof FinalizationRegistry > "u" ? { register: /* @__PURE__ */ __name(() => {
}, "register"), unregister: /* @__PURE__ */ __name(() => {
}, "unregister") } : new FinalizationRegistry(({ ptr: r3, instance: e }) => {
  e === c && i.__wbg_rawlocks_free(r3, 1);
});
function g(r3) {
  let e = i.__externref_table_alloc();
  return i.__wbindgen_externrefs.set(e, r3), e;
}
__name(g, "g");
var Y = typeof FinalizationRegistry > "u" ? { register: /* @__PURE__ */ __name(() => {
}, "register"), unregister: /* @__PURE__ */ __name(() => {
}, "unregister") } : new FinalizationRegistry((r3) => {
  r3.instance === c && i.__wbindgen_destroy_closure(r3.a, r3.b);
});
function ie(r3) {
  switch (typeof r3) {
    case "number":
    case "boolean":
    case "undefined":
      return `${r3}`;
    case "string":
      return JSON.stringify(r3);
    case "bigint":
      return `${r3}n`;
    case "symbol":
      return r3.description !== void 0 ? `Symbol(${r3.description})` : "Symbol";
    case "function":
      return typeof r3.name == "string" && r3.name !== "" ? `Function(${r3.name})` : "Function";
    case "object": {
      if (r3 === null) return "null";
      if (Array.isArray(r3)) return "[" + Array.from(r3, ie).join(", ") + "]";
      if (r3 instanceof Error) return `${r3.name}: ${r3.message}
${r3.stack}`;
      let e = toString.call(r3), t = /\[object ([^\]]+)\]/.exec(e)?.[1];
      if (t === void 0) return e;
      if (t === "Object") try {
        return "Object(" + JSON.stringify(r3) + ")";
      } catch {
        return "Object";
      }
      return t;
    }
  }
}
__name(ie, "ie");
function ve(r3, e) {
  r3 = r3 >>> 0;
  let t = l(), n = [];
  for (let _ = r3; _ < r3 + 4 * e; _ += 4) n.push(i.__wbindgen_externrefs.get(t.getUint32(_, true)));
  return i.__externref_drop_slice(r3, e), n;
}
__name(ve, "ve");
function L(r3, e) {
  return r3 = r3 >>> 0, A().subarray(r3 / 1, r3 / 1 + e);
}
__name(L, "L");
var I = null;
function l() {
  return (I === null || I.buffer.detached === true || I.buffer.detached === void 0 && I.buffer !== i.memory.buffer) && (I = new DataView(i.memory.buffer)), I;
}
__name(l, "l");
var W = null;
function J() {
  return (W === null || W.byteLength === 0) && (W = new Int32Array(i.memory.buffer)), W;
}
__name(J, "J");
function p(r3, e) {
  return r3 = r3 >>> 0, Ee(A().subarray(r3, r3 + e));
}
__name(p, "p");
var S = null;
function A() {
  return (S === null || S.byteLength === 0) && (S = new Uint8Array(i.memory.buffer)), S;
}
__name(A, "A");
function f(r3) {
  return r3 == null;
}
__name(f, "f");
function P(r3, e, t) {
  let n = { a: r3, b: e, cnt: 1, instance: c }, _ = /* @__PURE__ */ __name((...a) => {
    if (n.instance !== c) throw new Error("Cannot invoke closure from previous WASM instance");
    n.cnt++;
    let u = n.a;
    n.a = 0;
    try {
      return t(u, n.b, ...a);
    } finally {
      n.a = u, _._wbg_cb_unref();
    }
  }, "_");
  return _._wbg_cb_unref = () => {
    --n.cnt === 0 && (i.__wbindgen_destroy_closure(n.a, n.b), n.a = 0, Y.unregister(n));
  }, Y.register(_, n, n), _;
}
__name(P, "P");
function Ie(r3, e) {
  let t = e(r3.length * 4, 4) >>> 0;
  for (let n = 0; n < r3.length; n++) {
    let _ = g(r3[n]);
    l().setUint32(t + 4 * n, _, true);
  }
  return w = r3.length, t;
}
__name(Ie, "Ie");
function y(r3, e, t) {
  if (t === void 0) {
    let b = O.encode(r3), h = e(b.length, 1) >>> 0;
    return A().subarray(h, h + b.length).set(b), w = b.length, h;
  }
  let n = r3.length, _ = e(n, 1) >>> 0, a = A(), u = 0;
  for (; u < n; u++) {
    let b = r3.charCodeAt(u);
    if (b > 127) break;
    a[_ + u] = b;
  }
  if (u !== n) {
    u !== 0 && (r3 = r3.slice(u)), _ = t(_, n, n = u + r3.length * 3, 1) >>> 0;
    let b = A().subarray(_ + u, _ + n), h = O.encodeInto(r3, b);
    u += h.written, _ = t(_, n, u, 1) >>> 0;
  }
  return w = u, _;
}
__name(y, "y");
var D = false;
function d(r3) {
  let e = i.__wbindgen_externrefs.get(r3);
  return i.__externref_table_dealloc(r3), e;
}
__name(d, "d");
var oe = new TextDecoder("utf-8", { ignoreBOM: true });
oe.decode();
function Ee(r3) {
  return oe.decode(r3);
}
__name(Ee, "Ee");
var O = new TextEncoder();
"encodeInto" in O || (O.encodeInto = function(r3, e) {
  let t = O.encode(r3);
  return e.set(t), { read: r3.length, written: t.length };
});
var w = 0;
var V = new WebAssembly.Instance(Z, re());
var i = V.exports;
i.__wbindgen_start();
Error.stackTraceLimit = 100;
var v = ee();
function H() {
  v.criticalError && (console.log("Reinitializing Wasm application"), U(), v.criticalError = false, v.instanceId++);
}
__name(H, "H");
addEventListener("error", (r3) => {
  G(r3.error);
});
function G(r3) {
  r3 instanceof WebAssembly.RuntimeError && (console.error("Critical", r3), v.criticalError = true);
}
__name(G, "G");
var z = class extends ke {
  static {
    __name(this, "z");
  }
};
z.prototype.fetch = function(e) {
  return te.call(this, e, this.env, this.ctx);
};
z.prototype.scheduled = function(e) {
  return ne.call(this, e, this.env, this.ctx);
};
var Re = { set: /* @__PURE__ */ __name((r3, e, t, n) => Reflect.set(r3.instance, e, t, n), "set"), has: /* @__PURE__ */ __name((r3, e) => Reflect.has(r3.instance, e), "has"), deleteProperty: /* @__PURE__ */ __name((r3, e) => Reflect.deleteProperty(r3.instance, e), "deleteProperty"), apply: /* @__PURE__ */ __name((r3, e, t) => Reflect.apply(r3.instance, e, t), "apply"), construct: /* @__PURE__ */ __name((r3, e, t) => Reflect.construct(r3.instance, e, t), "construct"), getPrototypeOf: /* @__PURE__ */ __name((r3) => Reflect.getPrototypeOf(r3.instance), "getPrototypeOf"), setPrototypeOf: /* @__PURE__ */ __name((r3, e) => Reflect.setPrototypeOf(r3.instance, e), "setPrototypeOf"), isExtensible: /* @__PURE__ */ __name((r3) => Reflect.isExtensible(r3.instance), "isExtensible"), preventExtensions: /* @__PURE__ */ __name((r3) => Reflect.preventExtensions(r3.instance), "preventExtensions"), getOwnPropertyDescriptor: /* @__PURE__ */ __name((r3, e) => Reflect.getOwnPropertyDescriptor(r3.instance, e), "getOwnPropertyDescriptor"), defineProperty: /* @__PURE__ */ __name((r3, e, t) => Reflect.defineProperty(r3.instance, e, t), "defineProperty"), ownKeys: /* @__PURE__ */ __name((r3) => Reflect.ownKeys(r3.instance), "ownKeys") };
var T = { construct(r3, e, t) {
  try {
    H();
    let n = { instance: Reflect.construct(r3, e, t), instanceId: v.instanceId, ctor: r3, args: e, newTarget: t };
    return new Proxy(n, { ...Re, get(_, a, u) {
      _.instanceId !== v.instanceId && (_.instance = Reflect.construct(_.ctor, _.args, _.newTarget), _.instanceId = v.instanceId);
      let b = Reflect.get(_.instance, a, u);
      return typeof b != "function" ? b : b.constructor === Function ? new Proxy(b, { apply(h, j, F) {
        H();
        try {
          return h.apply(j, F);
        } catch (m) {
          throw G(m), m;
        }
      } }) : new Proxy(b, { async apply(h, j, F) {
        H();
        try {
          return await h.apply(j, F);
        } catch (m) {
          throw G(m), m;
        }
      } });
    } });
  } catch (n) {
    throw v.criticalError = true, n;
  }
} };
var Ae = new Proxy(z, T);
var Oe = new Proxy(x, T);
var ze = new Proxy(E, T);
var Te = new Proxy(k, T);
var Le = new Proxy(R, T);

// tests/worker/node_modules/wrangler/templates/middleware/middleware-ensure-req-body-drained.ts
var drainBody = /* @__PURE__ */ __name(async (request, env, _ctx, middlewareCtx) => {
  try {
    return await middlewareCtx.next(request, env);
  } finally {
    try {
      if (request.body !== null && !request.bodyUsed) {
        const reader = request.body.getReader();
        while (!(await reader.read()).done) {
        }
      }
    } catch (e) {
      console.error("Failed to drain the unused request body.", e);
    }
  }
}, "drainBody");
var middleware_ensure_req_body_drained_default = drainBody;

// tests/worker/node_modules/wrangler/templates/middleware/middleware-scheduled.ts
var scheduled = /* @__PURE__ */ __name(async (request, env, _ctx, middlewareCtx) => {
  const url = new URL(request.url);
  if (url.pathname === "/__scheduled") {
    const cron = url.searchParams.get("cron") ?? "";
    await middlewareCtx.dispatch("scheduled", { cron });
    return new Response("Ran scheduled event");
  }
  const resp = await middlewareCtx.next(request, env);
  if (request.headers.get("referer")?.endsWith("/__scheduled") && url.pathname === "/favicon.ico" && resp.status === 500) {
    return new Response(null, { status: 404 });
  }
  return resp;
}, "scheduled");
var middleware_scheduled_default = scheduled;

// tests/worker/node_modules/wrangler/templates/middleware/middleware-miniflare3-json-error.ts
function reduceError(e) {
  return {
    name: e?.name,
    message: e?.message ?? String(e),
    stack: e?.stack,
    cause: e?.cause === void 0 ? void 0 : reduceError(e.cause)
  };
}
__name(reduceError, "reduceError");
var jsonError = /* @__PURE__ */ __name(async (request, env, _ctx, middlewareCtx) => {
  try {
    return await middlewareCtx.next(request, env);
  } catch (e) {
    const error = reduceError(e);
    return Response.json(error, {
      status: 500,
      headers: { "MF-Experimental-Error-Stack": "true" }
    });
  }
}, "jsonError");
var middleware_miniflare3_json_error_default = jsonError;

// .wrangler/tmp/bundle-dUAIgz/middleware-insertion-facade.js
var __INTERNAL_WRANGLER_MIDDLEWARE__ = [
  middleware_ensure_req_body_drained_default,
  middleware_scheduled_default,
  middleware_miniflare3_json_error_default
];
var middleware_insertion_facade_default = Ae;

// tests/worker/node_modules/wrangler/templates/middleware/common.ts
var __facade_middleware__ = [];
function __facade_register__(...args) {
  __facade_middleware__.push(...args.flat());
}
__name(__facade_register__, "__facade_register__");
function __facade_invokeChain__(request, env, ctx, dispatch, middlewareChain) {
  const [head, ...tail] = middlewareChain;
  const middlewareCtx = {
    dispatch,
    next(newRequest, newEnv) {
      return __facade_invokeChain__(newRequest, newEnv, ctx, dispatch, tail);
    }
  };
  return head(request, env, ctx, middlewareCtx);
}
__name(__facade_invokeChain__, "__facade_invokeChain__");
function __facade_invoke__(request, env, ctx, dispatch, finalMiddleware) {
  return __facade_invokeChain__(request, env, ctx, dispatch, [
    ...__facade_middleware__,
    finalMiddleware
  ]);
}
__name(__facade_invoke__, "__facade_invoke__");

// .wrangler/tmp/bundle-dUAIgz/middleware-loader.entry.ts
var __Facade_ScheduledController__ = class ___Facade_ScheduledController__ {
  constructor(scheduledTime, cron, noRetry) {
    this.scheduledTime = scheduledTime;
    this.cron = cron;
    this.#noRetry = noRetry;
  }
  static {
    __name(this, "__Facade_ScheduledController__");
  }
  #noRetry;
  noRetry() {
    if (!(this instanceof ___Facade_ScheduledController__)) {
      throw new TypeError("Illegal invocation");
    }
    this.#noRetry();
  }
};
function wrapExportedHandler(worker) {
  if (__INTERNAL_WRANGLER_MIDDLEWARE__ === void 0 || __INTERNAL_WRANGLER_MIDDLEWARE__.length === 0) {
    return worker;
  }
  for (const middleware of __INTERNAL_WRANGLER_MIDDLEWARE__) {
    __facade_register__(middleware);
  }
  const fetchDispatcher = /* @__PURE__ */ __name(function(request, env, ctx) {
    if (worker.fetch === void 0) {
      throw new Error("Handler does not export a fetch() function.");
    }
    return worker.fetch(request, env, ctx);
  }, "fetchDispatcher");
  return {
    ...worker,
    fetch(request, env, ctx) {
      const dispatcher = /* @__PURE__ */ __name(function(type, init) {
        if (type === "scheduled" && worker.scheduled !== void 0) {
          const controller = new __Facade_ScheduledController__(
            Date.now(),
            init.cron ?? "",
            () => {
            }
          );
          return worker.scheduled(controller, env, ctx);
        }
      }, "dispatcher");
      return __facade_invoke__(request, env, ctx, dispatcher, fetchDispatcher);
    }
  };
}
__name(wrapExportedHandler, "wrapExportedHandler");
function wrapWorkerEntrypoint(klass) {
  if (__INTERNAL_WRANGLER_MIDDLEWARE__ === void 0 || __INTERNAL_WRANGLER_MIDDLEWARE__.length === 0) {
    return klass;
  }
  for (const middleware of __INTERNAL_WRANGLER_MIDDLEWARE__) {
    __facade_register__(middleware);
  }
  return class extends klass {
    #fetchDispatcher = /* @__PURE__ */ __name((request, env, ctx) => {
      this.env = env;
      this.ctx = ctx;
      if (super.fetch === void 0) {
        throw new Error("Entrypoint class does not define a fetch() function.");
      }
      return super.fetch(request);
    }, "#fetchDispatcher");
    #dispatcher = /* @__PURE__ */ __name((type, init) => {
      if (type === "scheduled" && super.scheduled !== void 0) {
        const controller = new __Facade_ScheduledController__(
          Date.now(),
          init.cron ?? "",
          () => {
          }
        );
        return super.scheduled(controller);
      }
    }, "#dispatcher");
    fetch(request) {
      return __facade_invoke__(
        request,
        this.env,
        this.ctx,
        this.#dispatcher,
        this.#fetchDispatcher
      );
    }
  };
}
__name(wrapWorkerEntrypoint, "wrapWorkerEntrypoint");
var WRAPPED_ENTRY;
if (typeof middleware_insertion_facade_default === "object") {
  WRAPPED_ENTRY = wrapExportedHandler(middleware_insertion_facade_default);
} else if (typeof middleware_insertion_facade_default === "function") {
  WRAPPED_ENTRY = wrapWorkerEntrypoint(middleware_insertion_facade_default);
}
var middleware_loader_entry_default = WRAPPED_ENTRY;
export {
  Oe as ContainerStartupOptions,
  ze as MinifyConfig,
  Te as R2Range,
  Le as RawLocks,
  __INTERNAL_WRANGLER_MIDDLEWARE__,
  middleware_loader_entry_default as default
};
//# sourceMappingURL=index.js.map
