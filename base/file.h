/* file.h — opening a file that must be a regular file, without waiting.
 *
 * Where it sits: base/, the floor: ps/ (checkpoints, their index and shard
 * manifests) and io/ (label lists) read files whose names come from the
 * user or from another file.  A FIFO opened for reading waits for a writer,
 * forever if none comes: the open here does not wait (O_NONBLOCK), the
 * file's type is checked before any read, and only then is the stream made
 * blocking again, so a FIFO, a directory or a device is a refusal, not a
 * hang.
 * What it does not do: no reading, no messages (the caller names the file
 * in its own line).
 */
#ifndef TOWER_BASE_FILE_H
#define TOWER_BASE_FILE_H

#include <stdio.h>

/* Opens path for reading ("rb") when it is a regular file (a symbolic link
 * to one counts).  Returns the stream (the caller fcloses it); NULL with
 * *instead = NULL and errno set when the open fails (ENOENT, EACCES, ...);
 * NULL with *instead naming what path is instead: "a directory", "a pipe or
 * FIFO", "a socket", "a device" (ENXIO at the open: "a socket or a device"),
 * or "not a regular file". */
FILE *file_open_regular(const char *path, const char **instead);

#endif
