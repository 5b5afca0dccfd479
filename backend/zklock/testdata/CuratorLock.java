// A Curator InterProcessMutex client for the compat=curator tests: the
// foreign side of a mixed fleet, using the recipe exactly as an
// application would (Debian's libcurator-recipes-java).
//
// usage: java CuratorLock CONNECT LOCKPATH SESSION_MS MODE [ARGS...]
//
//   count COUNTER LOG N WINDOW_MS  N times: acquire, read COUNTER's data,
//                                  sleep WINDOW_MS, write it + 1, create a
//                                  persistent sequential LOG/t- node with
//                                  data "curator", release, and pause up
//                                  to 10ms
//   hold                           acquire, print HELD, hold until killed
//   try                            one acquire with a zero wait: print
//                                  true or false (and release if true)
//
// Every mode prints READY once connected.
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

import org.apache.curator.framework.CuratorFramework;
import org.apache.curator.framework.CuratorFrameworkFactory;
import org.apache.curator.framework.recipes.locks.InterProcessMutex;
import org.apache.curator.retry.RetryOneTime;
import org.apache.zookeeper.CreateMode;

public class CuratorLock {
    public static void main(String[] args) throws Exception {
        String connect = args[0], path = args[1], mode = args[3];
        int session = Integer.parseInt(args[2]);
        CuratorFramework client = CuratorFrameworkFactory.newClient(connect, session, 15000, new RetryOneTime(100));
        client.start();
        if (!client.blockUntilConnected(60, TimeUnit.SECONDS)) {
            System.out.println("NOT CONNECTED");
            System.exit(2);
        }
        System.out.println("READY");
        InterProcessMutex lock = new InterProcessMutex(client, path);
        switch (mode) {
        case "count": {
            String counter = args[4], log = args[5];
            int n = Integer.parseInt(args[6]);
            long window = Long.parseLong(args[7]);
            for (int i = 0; i < n; i++) {
                if (!lock.acquire(60, TimeUnit.SECONDS)) {
                    System.out.println("NOT ACQUIRED");
                    System.exit(2);
                }
                try {
                    int v = Integer.parseInt(new String(client.getData().forPath(counter), StandardCharsets.UTF_8));
                    Thread.sleep(window);
                    client.setData().forPath(counter, Integer.toString(v + 1).getBytes(StandardCharsets.UTF_8));
                    client.create().withMode(CreateMode.PERSISTENT_SEQUENTIAL).forPath(log + "/t-", "curator".getBytes(StandardCharsets.UTF_8));
                } finally {
                    lock.release();
                }
                Thread.sleep(ThreadLocalRandom.current().nextInt(10));
            }
            System.out.println("DONE " + n);
            break;
        }
        case "hold":
            lock.acquire();
            System.out.println("HELD");
            Thread.sleep(600_000);
            break;
        case "try": {
            boolean got = lock.acquire(0, TimeUnit.SECONDS);
            System.out.println(got);
            if (got) {
                lock.release();
            }
            break;
        }
        }
        client.close();
        System.exit(0);
    }
}
