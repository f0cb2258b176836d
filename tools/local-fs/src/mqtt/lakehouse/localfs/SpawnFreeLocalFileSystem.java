package mqtt.lakehouse.localfs;

import org.apache.hadoop.fs.LocalFileSystem;

/**
 * Hadoop's checksummed {@code file:} file system ({@code fs.file.impl}) over {@link
 * SpawnFreeRawLocalFileSystem}.
 */
public class SpawnFreeLocalFileSystem extends LocalFileSystem {
  public SpawnFreeLocalFileSystem() {
    super(new SpawnFreeRawLocalFileSystem());
  }
}
