/* file.h — opening a file that must be a regular file, without waiting;
 * making a directory path, and removing again what was made.
 *
 * Where it sits: base/, the floor: ps/ (checkpoints, their index and shard
 * manifests) and io/ (label lists) read files whose names come from the
 * user or from another file.  A FIFO opened for reading waits for a writer,
 * forever if none comes: the open here does not wait (O_NONBLOCK), the
 * file's type is checked before any read, and only then is the stream made
 * blocking again, so a FIFO, a directory or a device is a refusal, not a
 * hang.
 * A command that makes the directories of its output (`tower convert
 * --out`, `tower train --train_dir`) and then fails before writing
 * anything removes the ones it made (file_make_dirs, then
 * file_remove_made_dirs), so a refused run leaves the tree as it was.
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

/* mkdir -p path (mode 0777 less the umask); a part of path, or path
 * itself, that exists as anything but a directory (or a link to one) is
 * -1 with ENOTDIR, as mkdir -p refuses it.  *made_n_bytes: the length of
 * the shallowest directory of path this call made (path itself, or a
 * prefix of it ending before a '/'), 0 when it made none.  0, or -1 with
 * errno set by the mkdir that failed (the directories made before it stay:
 * file_remove_made_dirs takes them). */
int file_make_dirs(const char *path, size_t *made_n_bytes);

/* Removes path and its parents, deepest first, down to the made_n_bytes
 * long one file_make_dirs made, each only if empty (rmdir): a directory
 * something was written into stays.  made_n_bytes 0: nothing. */
void file_remove_made_dirs(const char *path, size_t made_n_bytes);

#endif
