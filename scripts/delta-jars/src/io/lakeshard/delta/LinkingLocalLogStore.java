package io.lakeshard.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.BufferedOutputStream;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.LocalFileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;

/**
 * Delta's log store for {@code file:} tables that several processes commit to at once.
 *
 * <p>Delta's default for {@code file:} (HDFSLogStore) checks that the next commit file does not exist, then renames
 * its temporary file onto it. The two steps are one only inside a JVM (it synchronises them); across processes a
 * POSIX rename replaces, so two JVMs committing the same version can both succeed and the second commit file
 * replaces the first: a commit reported as done is gone from the log. This store writes the commit to a temporary
 * file in the log folder and then hard-links it to its name: {@code link(2)} fails when the name exists, in one
 * step of the file system, whichever process asks. The loser gets {@link FileAlreadyExistsException}, which Delta
 * answers as it answers a lost race (conflict check, retry at the next version). The file appears whole, so a
 * reader never sees part of a commit.
 *
 * <p>Overwrites (Delta's {@code _last_checkpoint}) go through an atomic rename. A file system without hard links
 * (some network and FUSE mounts) falls back to Delta's check-then-rename, with a warning on standard error.
 */
public class LinkingLocalLogStore extends HadoopFileSystemLogStore {

    private static volatile boolean warnedNoLinks = false;

    public LinkingLocalLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        org.apache.hadoop.fs.FileSystem fs = path.getFileSystem(hadoopConf);
        if (!(fs instanceof RawLocalFileSystem || fs instanceof LocalFileSystem)) {
            writeWithRename(path, actions, overwrite, hadoopConf);
            return;
        }
        java.nio.file.Path target = Paths.get(fs.makeQualified(path).toUri());
        java.nio.file.Path parent = target.getParent();
        if (!Files.isDirectory(parent)) {
            throw new FileNotFoundException("No such file or directory: " + parent);
        }
        if (!overwrite && Files.exists(target)) {
            throw new FileAlreadyExistsException(path.toString());  // the common loss, without writing anything
        }
        java.nio.file.Path temp = Paths.get(fs.makeQualified(createTempPath(path)).toUri());
        try {
            try (OutputStream out = new BufferedOutputStream(
                    Files.newOutputStream(temp, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE), 1 << 16)) {
                while (actions.hasNext()) {
                    out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
                }
            }
            if (overwrite) {
                Files.move(temp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
                return;
            }
            try {
                link(target, temp);
            } catch (FileAlreadyExistsException e) {
                throw new FileAlreadyExistsException(path.toString());
            } catch (UnsupportedOperationException | IOException e) {
                warnNoLinks(parent, e);
                if (Files.exists(target)) {
                    throw new FileAlreadyExistsException(path.toString());
                }
                Files.move(temp, target, StandardCopyOption.ATOMIC_MOVE);
            }
        } finally {
            Files.deleteIfExists(temp);
        }
    }

    /** Gives {@code file} the second name {@code name}, failing with {@link FileAlreadyExistsException} when the name
     * is taken. A file system without hard links refuses with {@link UnsupportedOperationException} or another
     * {@link IOException}, and the commit then falls back to check-then-rename. */
    protected void link(java.nio.file.Path name, java.nio.file.Path file) throws IOException {
        Files.createLink(name, file);
    }

    /** Other files (Delta's checkpoints) are written in place, where a reader can see part of one: true, as for
     * Delta's default, makes Delta write them aside and rename them into place. */
    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return true;
    }

    private static void warnNoLinks(java.nio.file.Path folder, Exception e) {
        if (!warnedNoLinks) {
            warnedNoLinks = true;
            System.err.println("lakeshard: " + folder + " takes no hard links (" + e
                + "); Delta commits there are made by rename, which two processes committing at once can race");
        }
    }
}
