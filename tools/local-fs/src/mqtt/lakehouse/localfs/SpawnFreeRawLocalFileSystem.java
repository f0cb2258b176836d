package mqtt.lakehouse.localfs;

import java.io.File;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.attribute.PosixFilePermission;
import java.util.EnumSet;
import java.util.Set;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.permission.FsPermission;
import org.apache.hadoop.io.nativeio.NativeIO;

/**
 * Hadoop's local file system without a process spawn per file operation.
 *
 * <p>Without Hadoop's native library (pip's PySpark has none), {@link RawLocalFileSystem} runs
 * {@code chmod} for every file it creates with a permission and {@code readlink} for every link
 * status it looks up; a rename through {@code FileContext} looks up eight. Spark's checkpoint
 * files and Delta's commit files are each created and renamed, so a streaming micro-batch into
 * a local Delta table spawned about forty processes. This class does the same two things in
 * the JVM:
 *
 * <ul>
 *   <li>{@link #setPermission}: {@code Files.setPosixFilePermissions} with the same nine bits;
 *       modes with setuid, setgid or sticky bits, and systems without POSIX permissions, go to
 *       Hadoop's own code.
 *   <li>{@link #getFileLinkStatus}: Hadoop asks {@code readlink} about {@code new
 *       File(path.toString())}; when that is not a symbolic link the answer is the file's status
 *       ({@link #getFileStatus}). The same test is made with {@code Files.isSymbolicLink}, and a
 *       symbolic link still goes to Hadoop's own code, so every answer stays Hadoop's.
 * </ul>
 *
 * <p>With the native library loaded, Hadoop's own code runs unchanged.
 */
public class SpawnFreeRawLocalFileSystem extends RawLocalFileSystem {
  private static final PosixFilePermission[] BITS = {
    PosixFilePermission.OTHERS_EXECUTE,
    PosixFilePermission.OTHERS_WRITE,
    PosixFilePermission.OTHERS_READ,
    PosixFilePermission.GROUP_EXECUTE,
    PosixFilePermission.GROUP_WRITE,
    PosixFilePermission.GROUP_READ,
    PosixFilePermission.OWNER_EXECUTE,
    PosixFilePermission.OWNER_WRITE,
    PosixFilePermission.OWNER_READ,
  };

  @Override
  public void setPermission(Path path, FsPermission permission) throws IOException {
    short mode = permission.toShort();
    if (NativeIO.isAvailable() || (mode & ~0777) != 0) {
      super.setPermission(path, permission);
      return;
    }
    Set<PosixFilePermission> bits = EnumSet.noneOf(PosixFilePermission.class);
    for (int i = 0; i < BITS.length; i++) {
      if ((mode & (1 << i)) != 0) {
        bits.add(BITS[i]);
      }
    }
    java.nio.file.Path file = pathToFile(path).toPath();
    try {
      Files.setPosixFilePermissions(file, bits);
    } catch (NoSuchFileException e) {
      throw new FileNotFoundException("File " + path + " does not exist");
    } catch (UnsupportedOperationException e) {
      super.setPermission(path, permission);
    }
  }

  @Override
  public FileStatus getFileLinkStatus(Path path) throws IOException {
    if (NativeIO.isAvailable() || Files.isSymbolicLink(new File(path.toString()).toPath())) {
      return super.getFileLinkStatus(path);
    }
    return getFileStatus(path);
  }
}
