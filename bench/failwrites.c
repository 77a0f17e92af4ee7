/* A file system that fails on command, for one process and its children: the fault campaign's failing and torn
 * writes (bench/chaos_faults.py).
 *
 * Loaded with LD_PRELOAD, it makes every write to a file under one folder fail with EIO while CLOCK_MONOTONIC (one
 * clock for every process of the machine) is inside a window; the first write it fails is torn first: half of its
 * bytes reach the file and the call returns that short count, so the caller's retry of the rest is what fails.
 * fsync and fdatasync of such a file fail with EIO in the window too. Covers write, pwrite, writev and pwritev
 * (Python's os and io, Arrow's and Rust's std files, the JVM's streams and channels); files elsewhere (logs, sockets,
 * pipes) are never touched.
 *
 * FAILWRITES="FROM:UNTIL:FOLDER": the window [FROM, UNTIL) in seconds of CLOCK_MONOTONIC, and the folder (an
 * absolute path, as /proc/self/fd names it). FAILWRITES_MARK=PATH: a file created at the first write failed, so the
 * campaign knows the fault struck a write and did not only fall on an idle or finished process.
 * FAILWRITES_ERRNO=N: the error the writes fail with (default 5, EIO; 28 is ENOSPC, a full disk).
 * Built by bench/chaos_faults.py with the machine's C compiler: cc -shared -fPIC -O2 -o failwrites.so failwrites.c
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static ssize_t (*real_write)(int, const void *, size_t);
static ssize_t (*real_pwrite)(int, const void *, size_t, off_t);
static ssize_t (*real_pwrite64)(int, const void *, size_t, off64_t);
static ssize_t (*real_writev)(int, const struct iovec *, int);
static ssize_t (*real_pwritev)(int, const struct iovec *, int, off_t);
static int (*real_fsync)(int);
static int (*real_fdatasync)(int);
static double window_from, window_until;
static char folder[PATH_MAX];
static size_t folder_len;
static const char *mark;
static int torn;
static int fail_errno = EIO;

static void load(void) __attribute__((constructor));

static void load(void) {
    real_write = (ssize_t(*)(int, const void *, size_t))dlsym(RTLD_NEXT, "write");
    real_pwrite = (ssize_t(*)(int, const void *, size_t, off_t))dlsym(RTLD_NEXT, "pwrite");
    real_pwrite64 = (ssize_t(*)(int, const void *, size_t, off64_t))dlsym(RTLD_NEXT, "pwrite64");
    real_writev = (ssize_t(*)(int, const struct iovec *, int))dlsym(RTLD_NEXT, "writev");
    real_pwritev = (ssize_t(*)(int, const struct iovec *, int, off_t))dlsym(RTLD_NEXT, "pwritev");
    real_fsync = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    real_fdatasync = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    mark = getenv("FAILWRITES_MARK");
    const char *code = getenv("FAILWRITES_ERRNO");
    if (code && atoi(code) > 0) fail_errno = atoi(code);
    const char *spec = getenv("FAILWRITES");
    if (!spec) return;
    char *end;
    window_from = strtod(spec, &end);
    if (*end != ':') return;
    window_until = strtod(end + 1, &end);
    if (*end != ':' || end[1] != '/') return;
    snprintf(folder, sizeof folder, "%s", end + 1);
    folder_len = strlen(folder);
    while (folder_len > 1 && folder[folder_len - 1] == '/') folder[--folder_len] = '\0';
}

/* Whether a write to fd is to fail now: inside the window, to a file under the folder. */
static int failing(int fd) {
    if (!folder_len) return 0;
    struct timespec now;
    if (clock_gettime(CLOCK_MONOTONIC, &now) != 0) return 0;
    double t = (double)now.tv_sec + (double)now.tv_nsec / 1e9;
    if (t < window_from || t >= window_until) return 0;
    char link[64], target[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = '\0';
    return strncmp(target, folder, folder_len) == 0 && (target[folder_len] == '/' || target[folder_len] == '\0');
}

static void struck(void) {
    if (!mark) return;
    int fd = open(mark, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd >= 0) close(fd);
}

static int tear_first(void) { return __sync_bool_compare_and_swap(&torn, 0, 1); }

static ssize_t fail(void) {
    struck();
    errno = fail_errno;
    return -1;
}

/* Whether a write of count bytes to fd fails now (-1, errno set); the first one it strikes is torn instead: count
 * is halved, so half of its bytes land and the caller's retry of the rest is what fails. */
static int strike(int fd, size_t *count) {
    if (*count <= 1 || !failing(fd)) return 0;
    if (!tear_first()) return (int)fail();
    struck();
    *count /= 2;
    return 0;
}

ssize_t write(int fd, const void *buf, size_t count) {
    if (!real_write) load();
    return strike(fd, &count) ? -1 : real_write(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    if (!real_pwrite) load();
    return strike(fd, &count) ? -1 : real_pwrite(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t offset) {
    if (!real_pwrite64) load();
    return strike(fd, &count) ? -1 : real_pwrite64(fd, buf, count, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    if (!real_writev) load();
    return failing(fd) ? fail() : real_writev(fd, iov, iovcnt);
}

ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    if (!real_pwritev) load();
    return failing(fd) ? fail() : real_pwritev(fd, iov, iovcnt, offset);
}

int fsync(int fd) {
    if (!real_fsync) load();
    return failing(fd) ? (int)fail() : real_fsync(fd);
}

int fdatasync(int fd) {
    if (!real_fdatasync) load();
    return failing(fd) ? (int)fail() : real_fdatasync(fd);
}
