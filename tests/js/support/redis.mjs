// Helpers for tests of the Redis push wake-up: the channel a lock's release
// publishes on (the core's `wake_channel`, src/core/redis/subscription.rs)
// and raw commands through an Upstash gateway (not through edgelock).

/** `edgelock:wake:<FNV-1a 128 of the lock key, 32 hex digits>`. */
export function wakeChannel(key) {
  const PRIME = 0x0000000001000000000000000000013bn;
  const MASK = (1n << 128n) - 1n;
  let h = 0x6c62272e07bb014262b821756295c58dn;
  for (const b of new TextEncoder().encode(key)) h = ((h ^ BigInt(b)) * PRIME) & MASK;
  return `edgelock:wake:${h.toString(16).padStart(32, "0")}`;
}

/** The lock key of `name` under `prefix`. */
export const lockKey = (name, prefix = "edgelock") => `{${prefix}:${name}}`;

/** A raw command through the Upstash gateway at `url`. */
export async function gatewayCommand(url, token, ...cmd) {
  const r = await fetch(url, { method: "POST", headers: { authorization: `Bearer ${token}` }, body: JSON.stringify(cmd) });
  const body = await r.json();
  if (!r.ok || body.error) throw new Error(`${cmd[0]}: ${JSON.stringify(body)}`);
  return body.result;
}

/** Subscribers of the wake-up channel of lock `name` on the node behind gateway `url`. */
export async function wakeSubscribers(url, token, name, prefix = "edgelock") {
  const [, n] = await gatewayCommand(url, token, "PUBSUB", "NUMSUB", wakeChannel(lockKey(name, prefix)));
  return Number(n);
}
