/* Helpers shared by the conformance programs.
 *
 * Every program prints one line per check: what was done and what came back
 * (a value, "ok", or the errno's name). Nothing that differs between runs
 * (ids, keys, pids, times) is printed, so a run against the kernel and a run
 * under LD_PRELOAD=libksync_sysv.so can be compared line by line. */
#ifndef KSYNC_SYSV_TEST_COMMON_H
#define KSYNC_SYSV_TEST_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ipc.h>
#include <sys/sem.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* glibc leaves union semun to the caller (SUSv3). */
union semun {
    int val;
    struct semid_ds *buf;
    unsigned short *array;
    struct seminfo *__buf;
};

#define PSEMS 10
#define NOBODY_UID 65534
#define NOBODY_GID 65534

/* A pointer that no process has mapped: the first page is never mapped on
 * Linux (vm.mmap_min_addr), so every access faults. */
#define BAD_ADDR ((void *)8)

static inline const char *errno_name(int e)
{
    switch (e) {
    case 0: return "0";
    case E2BIG: return "E2BIG";
    case EACCES: return "EACCES";
    case EAGAIN: return "EAGAIN";
    case EEXIST: return "EEXIST";
    case EFAULT: return "EFAULT";
    case EFBIG: return "EFBIG";
    case EIDRM: return "EIDRM";
    case EINTR: return "EINTR";
    case EINVAL: return "EINVAL";
    case ENOENT: return "ENOENT";
    case ENOMEM: return "ENOMEM";
    case ENOSPC: return "ENOSPC";
    case EPERM: return "EPERM";
    case ERANGE: return "ERANGE";
    case ENOSYS: return "ENOSYS";
    default: return "E?";
    }
}

/* For calls whose return value is not deterministic (an id): only success or errno. */
static inline void expect_ok(const char *what, long rc)
{
    if (rc == -1)
        printf("%s: -1 %s\n", what, errno_name(errno));
    else
        printf("%s: ok\n", what);
}

/* For calls whose return value is deterministic (a value, a count). */
static inline void show(const char *what, long rc)
{
    if (rc == -1)
        printf("%s: -1 %s\n", what, errno_name(errno));
    else
        printf("%s: %ld\n", what, rc);
}

/* A failure the program cannot go on from: say so on stdout (the comparison
 * shows it) and stop with a distinct status. */
static inline void die(const char *what)
{
    printf("FATAL %s: %s\n", what, errno_name(errno));
    fflush(stdout);
    exit(2);
}

static inline int new_set(int nsems, int mode)
{
    int id = semget(IPC_PRIVATE, nsems, IPC_CREAT | mode);
    if (id == -1)
        die("semget(IPC_PRIVATE)");
    return id;
}

static inline void remove_set(int id)
{
    if (semctl(id, 0, IPC_RMID) == -1)
        die("semctl(IPC_RMID)");
}

/* A key no other run uses at the same time: the pid is in it. */
static inline key_t private_key(int salt)
{
    return (key_t)(0x4b000000 | ((getpid() & 0xffff) << 8) | (salt & 0xff));
}

static inline void sleep_ms(long ms)
{
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

/* Waits until `count` processes sleep on semaphore `num` of `id` (GETNCNT or
 * GETZCNT says so). Gives up after ten seconds, which the output shows. */
static inline int wait_sleepers(int id, int num, int cmd, int count)
{
    for (int i = 0; i < 10000; i++) {
        int n = semctl(id, num, cmd);
        if (n == count)
            return 1;
        sleep_ms(1);
    }
    printf("timed out waiting for %d sleepers\n", count);
    return 0;
}

/* Runs `fn` in a child whose real and effective ids are nobody's. Prints
 * nothing itself; returns the child's exit status. */
static inline int as_nobody(void (*fn)(void *), void *arg)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == -1)
        die("fork");
    if (pid == 0) {
        if (setgid(NOBODY_GID) == -1 || setuid(NOBODY_UID) == -1)
            die("setuid(nobody)");
        fn(arg);
        fflush(stdout);
        _exit(0);
    }
    int status;
    waitpid(pid, &status, 0);
    return status;
}

static inline int is_root(void)
{
    return geteuid() == 0;
}

#endif
