// A Java Curator 5.4 client for edgelock's interop tests, driven over pipes.
//
// Usage: java -cp <classes>:<curator jars> CuratorPeer CONNECT [SESSION_MS]
// Prints "READY <session id hex>" once connected, then reads one command per
// line on stdin and answers each with exactly one line on stdout:
// "OK …", "NO" (not acquired / no such node / no leader) or "ERR <message>".
// Exits on "close" or at the end of stdin (so it never outlives the test
// process that holds the pipe). Logs (SLF4J simple) go to stderr.
//
// Commands (P is an absolute ZooKeeper path, MS a wait in ms: 0 = try once,
// negative = wait forever):
//   mutex-acquire P MS      InterProcessMutex        -> OK <node path> <czxid> | NO
//   mutex-release P
//   sem-acquire P MAX MS    InterProcessSemaphoreV2  -> OK <lease path> <czxid> | NO
//   sem-release P           returns the newest lease of P
//   read-acquire P MS / read-release P / write-acquire P MS / write-release P
//                           InterProcessReadWriteLock -> OK <node path> <czxid> | NO
//   multi-acquire P1,P2 MS / multi-release P1,P2   InterProcessMultiLock -> OK | NO
//   latch-start P ID        LeaderLatch with participant id ID (no spaces)
//   latch-has P [MS]        OK if this latch leads (waiting up to MS), else NO
//   latch-leader P          OK <leader id> | NO (Curator's getLeader, read fresh)
//   latch-node P            OK <own latch node path> <czxid> | NO
//   latch-close P
//   children P              OK <names sorted, space-separated> | NO (no node)
//   data P                  OK <data as UTF-8> | NO
//   stat P                  OK <czxid> <ephemeralOwner hex> | NO
//   session                 OK <session id hex>
//   bench-mutex P N         N uncontended acquire+release rounds of one InterProcessMutex
//                           -> OK <N> <elapsed ns> (run it twice: the first warms the JIT)
//   close                   OK, then exit
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Deque;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.leader.LeaderLatch;
import org.apache.curator.framework.recipes.leader.Participant;
import org.apache.curator.framework.recipes.locks.InterProcessLock;
import org.apache.curator.framework.recipes.locks.InterProcessMultiLock;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.framework.recipes.locks.InterProcessReadWriteLock;
import org.apache.curator.framework.recipes.locks.InterProcessSemaphoreV2;
import org.apache.curator.framework.recipes.locks.Lease;
import org.apache.curator.retry.RetryNTimes;
import org.apache.curator.utils.ZKPaths;
import org.apache.zookeeper.KeeperException;
import org.apache.zookeeper.data.Stat;

public final class CuratorPeer {
    // InterProcessMutex.getLockPath() is protected; the node path it holds is
    // what the tests compare with edgelock's view, so read it reflectively
    // (classpath mode: Curator is in the unnamed module, access is allowed).
    private static final Method LOCK_PATH;
    static {
        try {
            LOCK_PATH = InterProcessMutex.class.getDeclaredMethod("getLockPath");
            LOCK_PATH.setAccessible(true);
        } catch (NoSuchMethodException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    private final CuratorFramework client;
    private final Map<String, InterProcessMutex> mutexes = new HashMap<>();
    private final Map<String, InterProcessReadWriteLock> rwLocks = new HashMap<>();
    private final Map<String, InterProcessSemaphoreV2> semaphores = new HashMap<>();
    private final Map<String, Deque<Lease>> leases = new HashMap<>();
    private final Map<String, InterProcessMultiLock> multiLocks = new HashMap<>();
    private final Map<String, LeaderLatch> latches = new HashMap<>();

    private CuratorPeer(CuratorFramework client) {
        this.client = client;
    }

    public static void main(String[] args) throws Exception {
        String connect = args[0];
        int sessionMs = args.length > 1 ? Integer.parseInt(args[1]) : 4000;
        CuratorFramework client = CuratorFrameworkFactory.newClient(
                connect, sessionMs, 15000, new RetryNTimes(30, 200));
        client.start();
        if (!client.blockUntilConnected(60, TimeUnit.SECONDS)) {
            System.out.println("ERR not connected to " + connect + " within 60 s");
            System.exit(1);
        }
        CuratorPeer peer = new CuratorPeer(client);
        System.out.println("READY " + peer.sessionId());
        System.out.flush();
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            String answer;
            try {
                answer = peer.run(line.trim().split(" +"));
            } catch (Exception e) {
                answer = "ERR " + oneLine(e);
            }
            System.out.println(answer);
            System.out.flush();
            if (line.trim().equals("close")) {
                break;
            }
        }
        peer.shutdown();
        System.exit(0);
    }

    private String run(String[] a) throws Exception {
        switch (a[0]) {
            case "mutex-acquire": return mutexAcquire(a[1], ms(a, 2));
            case "mutex-release": return release(mutexes.get(a[1]), a[1]);
            case "sem-acquire": return semAcquire(a[1], Integer.parseInt(a[2]), ms(a, 3));
            case "sem-release": return semRelease(a[1]);
            case "read-acquire": return lockAcquire(rwLock(a[1]).readLock(), ms(a, 2));
            case "read-release": return release(rwLock(a[1]).readLock(), a[1]);
            case "write-acquire": return lockAcquire(rwLock(a[1]).writeLock(), ms(a, 2));
            case "write-release": return release(rwLock(a[1]).writeLock(), a[1]);
            case "multi-acquire": return acquire(multiLock(a[1]), ms(a, 2)) ? "OK" : "NO";
            case "multi-release": return release(multiLocks.get(a[1]), a[1]);
            case "latch-start": return latchStart(a[1], a.length > 2 ? a[2] : "");
            case "latch-has": return latchHas(a[1], a.length > 2 ? Long.parseLong(a[2]) : 0);
            case "latch-leader": return latchLeader(a[1]);
            case "latch-node": return latchNode(a[1]);
            case "latch-close": return latchClose(a[1]);
            case "children": return children(a[1]);
            case "data": return data(a[1]);
            case "stat": return stat(a[1]);
            case "session": return "OK " + sessionId();
            case "bench-mutex": return benchMutex(a[1], Integer.parseInt(a[2]));
            case "close": return "OK";
            default: return "ERR unknown command " + a[0];
        }
    }

    private static long ms(String[] a, int i) {
        if (a.length <= i) {
            throw new IllegalArgumentException("missing wait (ms)");
        }
        return Long.parseLong(a[i]);
    }

    private static boolean acquire(InterProcessLock lock, long ms) throws Exception {
        if (ms < 0) {
            lock.acquire();
            return true;
        }
        return lock.acquire(ms, TimeUnit.MILLISECONDS);
    }

    private static String release(InterProcessLock lock, String path) throws Exception {
        if (lock == null) {
            return "ERR nothing acquired on " + path;
        }
        lock.release();
        return "OK";
    }

    private String mutexAcquire(String path, long ms) throws Exception {
        InterProcessMutex m = mutexes.computeIfAbsent(path, p -> new InterProcessMutex(client, p));
        return lockAcquire(m, ms);
    }

    private String lockAcquire(InterProcessMutex lock, long ms) throws Exception {
        if (!acquire(lock, ms)) {
            return "NO";
        }
        return held((String) LOCK_PATH.invoke(lock));
    }

    private InterProcessReadWriteLock rwLock(String path) {
        return rwLocks.computeIfAbsent(path, p -> new InterProcessReadWriteLock(client, p));
    }

    private InterProcessMultiLock multiLock(String paths) {
        List<String> list = Arrays.asList(paths.split(","));
        return multiLocks.computeIfAbsent(paths, p -> new InterProcessMultiLock(client, list));
    }

    private String semAcquire(String path, int max, long ms) throws Exception {
        // One semaphore object per (path, limit): Curator keeps the limit
        // client-side, so a different limit is a different participant view.
        InterProcessSemaphoreV2 sem = semaphores.computeIfAbsent(
                path + " " + max, k -> new InterProcessSemaphoreV2(client, path, max));
        Lease lease = ms < 0 ? sem.acquire() : sem.acquire(ms, TimeUnit.MILLISECONDS);
        if (lease == null) {
            return "NO";
        }
        leases.computeIfAbsent(path, p -> new ArrayDeque<>()).push(lease);
        // getNodeName() is the bare name of the node under P/leases.
        String name = lease.getNodeName();
        return held(name.startsWith("/") ? name : ZKPaths.makePath(path, "leases", name));
    }

    private String semRelease(String path) throws Exception {
        Deque<Lease> held = leases.get(path);
        if (held == null || held.isEmpty()) {
            return "ERR no lease held on " + path;
        }
        held.pop().close();
        return "OK";
    }

    private String latchStart(String path, String id) throws Exception {
        if (latches.containsKey(path)) {
            return "ERR latch already started on " + path;
        }
        LeaderLatch latch = new LeaderLatch(client, path, id);
        latch.start();
        latches.put(path, latch);
        return "OK";
    }

    private LeaderLatch latch(String path) {
        LeaderLatch latch = latches.get(path);
        if (latch == null) {
            throw new IllegalStateException("no latch started on " + path);
        }
        return latch;
    }

    private String latchHas(String path, long ms) throws Exception {
        LeaderLatch latch = latch(path);
        if (ms > 0) {
            latch.await(ms, TimeUnit.MILLISECONDS);
        }
        return latch.hasLeadership() ? "OK" : "NO";
    }

    private String latchLeader(String path) throws Exception {
        // An unstarted latch reads the participants without joining.
        LeaderLatch latch = latches.get(path);
        Participant leader = (latch != null ? latch : new LeaderLatch(client, path)).getLeader();
        return leader.isLeader() ? "OK " + leader.getId() : "NO";
    }

    private String latchNode(String path) throws Exception {
        String ours = latch(path).getOurPath();
        return ours == null ? "NO" : held(ours);
    }

    private String latchClose(String path) throws Exception {
        LeaderLatch latch = latches.remove(path);
        if (latch == null) {
            return "ERR no latch started on " + path;
        }
        latch.close();
        return "OK";
    }

    private String benchMutex(String path, int rounds) throws Exception {
        InterProcessMutex m = new InterProcessMutex(client, path);
        long start = System.nanoTime();
        for (int i = 0; i < rounds; i++) {
            m.acquire();
            m.release();
        }
        return "OK " + rounds + " " + (System.nanoTime() - start);
    }

    private String children(String path) throws Exception {
        try {
            List<String> names = new ArrayList<>(client.getChildren().forPath(path));
            Collections.sort(names);
            return names.isEmpty() ? "OK" : "OK " + String.join(" ", names);
        } catch (KeeperException.NoNodeException e) {
            return "NO";
        }
    }

    private String data(String path) throws Exception {
        try {
            byte[] bytes = client.getData().forPath(path);
            return "OK " + (bytes == null ? "" : new String(bytes, StandardCharsets.UTF_8));
        } catch (KeeperException.NoNodeException e) {
            return "NO";
        }
    }

    private String stat(String path) throws Exception {
        Stat s = client.checkExists().forPath(path);
        return s == null ? "NO" : "OK " + s.getCzxid() + " " + Long.toHexString(s.getEphemeralOwner());
    }

    // "OK <path> <czxid>" for a node this peer holds (czxid -1 if it is gone already).
    private String held(String path) throws Exception {
        Stat s = client.checkExists().forPath(path);
        return "OK " + path + " " + (s == null ? -1 : s.getCzxid());
    }

    private String sessionId() throws Exception {
        return Long.toHexString(client.getZookeeperClient().getZooKeeper().getSessionId());
    }

    private void shutdown() {
        for (LeaderLatch latch : latches.values()) {
            try {
                latch.close();
            } catch (Exception e) {
                // The session close below removes its node anyway.
            }
        }
        client.close();
    }

    private static String oneLine(Exception e) {
        Throwable t = e;
        if (t instanceof java.lang.reflect.InvocationTargetException && t.getCause() != null) {
            t = t.getCause();
        }
        String msg = t.getClass().getSimpleName() + ": " + t.getMessage();
        return msg.replace('\n', ' ').replace('\r', ' ');
    }
}
