// The socket factory of the Node entry (Bun runs the Node entry too): TCP
// through node:net, TLS through node:tls. The contract, the same in every
// runtime (src/js/sockets.rs, `SocketFactory` in index.d.ts):
//   openSocket({ host, port, tls, serverName }) returns { write(bytes), close() };
//   the client then sets onopen(), ondata(bytes), onend(), onerror(message),
//   called only from later events, none after close() or after the first
//   onend / onerror.
// A socket error never escapes: every socket has its "error" listener.
import net from "node:net";
import tls from "node:tls";

/** Certificates to trust, for every socket of the factory: Node's own store plus `ca` (PEM text or Buffer, or an array of them). */
function secureContext(ca) {
  if (ca === undefined) return undefined;
  return tls.createSecureContext({ ca: [...tls.rootCertificates, ...[ca].flat()] });
}

/**
 * A socket factory over node:net / node:tls. `options.ca`: certificates the
 * TLS sockets trust beside Node's default trust store.
 */
export function nodeSockets({ ca } = {}) {
  const context = secureContext(ca);
  return function openSocket({ host, port, tls: secure, serverName }) {
    let finished = false;
    const socket = {
      onopen() {},
      ondata() {},
      onend() {},
      onerror() {},
      write(bytes) {
        if (!finished) conn.write(bytes);
      },
      close() {
        finished = true;
        conn.destroy();
      },
    };
    const finish = (report) => {
      if (finished) return;
      finished = true;
      report();
    };
    const name = serverName ?? host;
    const conn = secure
      // Node refuses an IP address as SNI (RFC 6066) but checks the certificate against it all the same.
      ? tls.connect({ host, port, servername: net.isIP(name) ? undefined : name, secureContext: context, checkServerIdentity: (_, cert) => tls.checkServerIdentity(name, cert) })
      : net.connect({ host, port });
    conn.setNoDelay(true);
    conn.once(secure ? "secureConnect" : "connect", () => {
      if (!finished) socket.onopen();
    });
    conn.on("data", (bytes) => {
      if (!finished) socket.ondata(bytes);
    });
    conn.on("end", () => finish(() => socket.onend()));
    conn.on("error", (e) => finish(() => socket.onerror(String(e?.message ?? e))));
    conn.on("close", () => finish(() => socket.onend()));
    return socket;
  };
}
