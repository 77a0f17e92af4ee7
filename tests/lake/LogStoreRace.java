// Writers racing for each commit version of one Delta log through a LogStore, one store instance each (what two
// processes have: nothing shared but the file system). Run by tests/lake/test_local_log_store.py with Java's
// source launcher:  java -cp <jars> LogStoreRace.java <LogStore class> <log folder> <versions> <writers>
// Each version, the writers are released together and all try to write it (put-if-absent); a writer that gets
// FileAlreadyExistsException lost that version. Prints one JSON object: per version, which writers were told they
// won, and whose commit the file holds.
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

public class LogStoreRace {
    public static void main(String[] args) throws Exception {
        String storeClass = args[0];
        String folder = args[1];
        int versions = Integer.parseInt(args[2]);
        int writers = Integer.parseInt(args[3]);
        CyclicBarrier start = new CyclicBarrier(writers);
        boolean[][] won = new boolean[writers][versions];
        List<Thread> threads = new ArrayList<>();
        List<Throwable> errors = new ArrayList<>();
        for (int w = 0; w < writers; w++) {
            final int me = w;
            Configuration conf = new Configuration();
            io.delta.storage.LogStore store = (io.delta.storage.LogStore) Class.forName(storeClass)
                .getConstructor(Configuration.class).newInstance(conf);
            Thread thread = new Thread(() -> {
                try {
                    for (int v = 0; v < versions; v++) {
                        start.await();
                        Path path = new Path(Paths.get(folder, String.format("%020d.json", v)).toUri());
                        try {
                            store.write(path, List.of("{\"writer\":" + me + "}").iterator(), false, conf);
                            won[me][v] = true;
                        } catch (FileAlreadyExistsException lost) {
                            // another writer has this version
                        }
                    }
                } catch (Throwable e) {
                    synchronized (errors) { errors.add(e); }
                    start.reset();
                }
            });
            threads.add(thread);
            thread.start();
        }
        for (Thread thread : threads) {
            thread.join();
        }
        if (!errors.isEmpty()) {
            throw new RuntimeException(errors.get(0));
        }
        StringBuilder out = new StringBuilder("{\"versions\":[");
        for (int v = 0; v < versions; v++) {
            StringBuilder winners = new StringBuilder();
            for (int w = 0; w < writers; w++) {
                if (won[w][v]) {
                    winners.append(winners.length() == 0 ? "" : ",").append(w);
                }
            }
            String held = Files.readString(Paths.get(folder, String.format("%020d.json", v))).trim();
            out.append(v == 0 ? "" : ",").append("{\"winners\":[").append(winners).append("],\"file\":")
                .append(held).append("}");
        }
        System.out.println(out.append("]}"));
    }
}
