// The socket factory of the workerd / Cloudflare Workers entry: `connect()`
// from `cloudflare:sockets` (TLS with `secureTransport: "on"`; the server
// name is the host connected to, `connect()` takes no other). The contract,
// the same in every runtime (src/js/sockets.rs, `SocketFactory` in
// index.d.ts):
//   openSocket({ host, port, tls, serverName }) returns { write(bytes), close() };
//   the client then sets onopen(), ondata(bytes), onend(), onerror(message),
//   called only from later events, none after close() or after the first
//   onend / onerror.
// A socket error never escapes: every promise of a socket is handled.
// Workers cannot share I/O objects between requests: a client (and its
// sockets) belongs to the request that made it.
import { connect } from "cloudflare:sockets";

/** A socket factory over `connect()`. */
export function workerdSockets() {
  return function openSocket({ host, port, tls }) {
    let finished = false;
    const fail = (e) => {
      if (finished) return;
      finished = true;
      raw.close().catch(() => {});
      socket.onerror(String(e?.message ?? e));
    };
    const raw = connect({ hostname: host, port }, { secureTransport: tls ? "on" : "off", allowHalfOpen: false });
    raw.closed.catch(() => {}); // reported through `opened` or the reader
    const writer = raw.writable.getWriter();
    const socket = {
      onopen() {},
      ondata() {},
      onend() {},
      onerror() {},
      write(bytes) {
        if (!finished) writer.write(bytes).catch(fail);
      },
      close() {
        finished = true;
        raw.close().catch(() => {});
      },
    };
    (async () => {
      await raw.opened;
      if (finished) return;
      socket.onopen();
      const reader = raw.readable.getReader();
      for (;;) {
        const { done, value } = await reader.read();
        if (finished) return;
        if (done) break;
        socket.ondata(value);
      }
      finished = true;
      raw.close().catch(() => {});
      socket.onend();
    })().catch(fail);
    return socket;
  };
}
