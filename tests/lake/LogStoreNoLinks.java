// lakeshard's log store on a file system that takes no hard links (its link step refused, as some network and FUSE
// mounts refuse it), so every commit goes through the fallback. Run by tests/lake/test_local_log_store.py with Java's
// source launcher:  java -cp <jars> LogStoreNoLinks.java <log folder> <versions>
// One writer commits each version, then tries each version again (put-if-absent must refuse it), then overwrites
// _last_checkpoint twice. Prints one JSON object: how many commits were made and refused, and what
// _last_checkpoint holds.
import io.lakeshard.delta.LinkingLocalLogStore;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.List;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.Path;

public class LogStoreNoLinks {
    static class NoLinks extends LinkingLocalLogStore {
        NoLinks(Configuration conf) {
            super(conf);
        }

        @Override
        protected void link(java.nio.file.Path name, java.nio.file.Path file) {
            throw new UnsupportedOperationException("no hard links on this file system");
        }
    }

    public static void main(String[] args) throws Exception {
        String folder = args[0];
        int versions = Integer.parseInt(args[1]);
        Configuration conf = new Configuration();
        NoLinks store = new NoLinks(conf);
        int written = 0;
        int refused = 0;
        for (int round = 0; round < 2; round++) {
            for (int v = 0; v < versions; v++) {
                Path path = new Path(Paths.get(folder, String.format("%020d.json", v)).toUri());
                try {
                    store.write(path, List.of("{\"version\":" + v + ",\"round\":" + round + "}").iterator(), false, conf);
                    written++;
                } catch (FileAlreadyExistsException taken) {
                    refused++;
                }
            }
        }
        Path last = new Path(Paths.get(folder, "_last_checkpoint").toUri());
        store.write(last, List.of("{\"version\":0}").iterator(), true, conf);
        store.write(last, List.of("{\"version\":1}").iterator(), true, conf);
        String held = Files.readString(Paths.get(folder, "_last_checkpoint")).trim();
        System.out.println("{\"written\":" + written + ",\"refused\":" + refused + ",\"last_checkpoint\":" + held + "}");
    }
}
