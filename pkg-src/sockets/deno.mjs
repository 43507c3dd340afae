// The socket factory of the Deno entry: TCP through `Deno.connect`, TLS by
// `Deno.startTls` on it (the server name may differ from the host connected
// to). The contract, the same in every runtime (src/js/sockets.rs,
// `SocketFactory` in index.d.ts):
//   openSocket({ host, port, tls, serverName }) returns { write(bytes), close() };
//   the client then sets onopen(), ondata(bytes), onend(), onerror(message),
//   called only from later events, none after close() or after the first
//   onend / onerror.
// A socket error never escapes: every promise of a socket is handled.

const READ_BUFFER = 16 * 1024;

async function writeAll(conn, bytes) {
  for (let at = 0; at < bytes.length;) at += await conn.write(bytes.subarray(at));
}

/**
 * A socket factory over Deno.connect / Deno.startTls. `options.ca`: PEM
 * certificates (a string or an array) the TLS sockets trust beside Deno's
 * default trust store.
 */
export function denoSockets({ ca } = {}) {
  const caCerts = ca === undefined ? undefined : [ca].flat().map(String);
  return function openSocket({ host, port, tls, serverName }) {
    let conn = null;
    let finished = false;
    let writing = Promise.resolve();
    const fail = (e) => {
      if (finished) return;
      finished = true;
      try { conn?.close(); } catch { /* already closed */ }
      socket.onerror(String(e?.message ?? e));
    };
    const socket = {
      onopen() {},
      ondata() {},
      onend() {},
      onerror() {},
      write(bytes) {
        writing = writing.then(() => (finished ? undefined : writeAll(conn, bytes))).catch(fail);
      },
      close() {
        finished = true;
        try { conn?.close(); } catch { /* already closed */ }
      },
    };
    (async () => {
      let tcp = await Deno.connect({ hostname: host, port });
      if (finished) return tcp.close();
      tcp.setNoDelay(true);
      conn = tcp;
      if (tls) {
        conn = await Deno.startTls(tcp, { hostname: serverName ?? host, caCerts });
        await conn.handshake();
      }
      if (finished) return conn.close();
      socket.onopen();
      const buffer = new Uint8Array(READ_BUFFER);
      for (;;) {
        const n = await conn.read(buffer);
        if (finished) return;
        if (n === null) break;
        // The client copies the bytes before ondata returns: the buffer is reused.
        socket.ondata(buffer.subarray(0, n));
      }
      finished = true;
      try { conn.close(); } catch { /* already closed */ }
      socket.onend();
    })().catch(fail);
    return socket;
  };
}
