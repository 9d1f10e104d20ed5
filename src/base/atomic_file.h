/* SPDX-License-Identifier: MIT */
/*
 * atomic_file.h - write an output file beside its final name and publish
 * it whole.
 *
 * The bytes go to a new temporary file in the same directory, created with
 * O_CREAT|O_EXCL|O_NOFOLLOW under a name of its own (NAME.tmp.PID.N), so
 * nothing planted there beforehand - a symbolic link to another file, a
 * FIFO, another run's temporary file - is followed, truncated or shared.
 * Publishing fsyncs the file, renames it to NAME and fsyncs the directory:
 * after a crash NAME holds the whole new file or what it held before, never
 * part of one. An existing NAME is replaced only when asked; otherwise the
 * rename refuses it atomically (renameat2 RENAME_NOREPLACE, or link() and
 * unlink() where the filesystem lacks it), so two runs never overwrite
 * each other's outputs. The directory is opened once, at the start: every
 * later step works relative to it.
 *
 * Several files can also be published together: open each in a directory
 * the caller holds open (stk__atomic_file_open_at), finish each when its
 * bytes are written (fsync and close: no descriptor stays open per file),
 * and publish them all at the end, syncing the directory once.
 */
#ifndef STK_ATOMIC_FILE_H
#define STK_ATOMIC_FILE_H

#include "base/error.h"

struct stk__atomic_file {
    char *path; /* final name as given (for messages); NULL unless open */
    char *tmp;  /* temporary name, relative to dir_fd */
    const char *base; /* final name relative to dir_fd (inside path) */
    int dir_fd; /* the directory, -1 when not open */
    int own_dir; /* dir_fd was opened here (else the caller's) */
    int fd;     /* the temporary file, -1 when not open or finished */
};

/* Create the temporary file for path, with the permissions mode (less the
 * umask; 0600 for a file others must not read: it has them from its
 * creation on, so nobody opens it in between); 0 with f->fd open for
 * writing, or STK_EIO/STK_ENOMEM (STK_EINVAL for a path ending in '/')
 * with a message naming path. */
int stk__atomic_file_open(struct stk__atomic_file *f, const char *path, unsigned mode,
                          struct stk__err *err);

/* The same in the directory dir_fd, which the caller keeps open until the
 * file is published or aborted; path names the file in messages, and its
 * part after the last '/' is its name in dir_fd. */
int stk__atomic_file_open_at(struct stk__atomic_file *f, int dir_fd, const char *path,
                             unsigned mode, struct stk__err *err);

/* fsync and close the file, rename it to its final name (replacing an
 * existing file only with replace; else STK_EEXIST) and fsync the
 * directory. Nothing is left open or under the temporary name afterwards,
 * whatever the result. */
int stk__atomic_file_commit(struct stk__atomic_file *f, int replace, struct stk__err *err);

/* The first and second halves of commit, for files published together:
 * finish fsyncs and closes the file (it stays under its temporary name;
 * on failure it is removed and f cleared); publish renames a finished file
 * to its final name as commit does (removing it on failure) and clears f,
 * but leaves syncing the directory to the caller. */
int stk__atomic_file_finish(struct stk__atomic_file *f, struct stk__err *err);
int stk__atomic_file_publish(struct stk__atomic_file *f, int replace, struct stk__err *err);

/* Close and remove the temporary file; nothing is published. Accepts a
 * zeroed struct, one whose open failed, one finished and one already
 * committed or published. */
void stk__atomic_file_abort(struct stk__atomic_file *f);

/* 1 if something (a file, a directory, a link, dangling or not) has the
 * name path, 0 if nothing does (also when its directory does not exist),
 * or a negative errno when that cannot be told. */
int stk__path_taken(const char *path);

#endif
