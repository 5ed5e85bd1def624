/* The variadic half of semctl(2).
 *
 * glibc declares `int semctl(int semid, int semnum, int cmd, ...)` and reads
 * the fourth argument, a `union semun`, only for the commands that take one
 * (SUSv3 leaves the union to the caller, so it may be absent). Stable Rust
 * cannot define a C-variadic function, so this function does the `va_arg`
 * exactly as glibc does and hands the union on, as the `unsigned long` the
 * kernel's semctl system call takes, to the Rust entry point.
 *
 * The exported `semctl` symbol is a Rust naked function that jumps here with
 * every argument register untouched (see exports.rs for why the symbol cannot be
 * this function itself). */
#define _GNU_SOURCE
#include <stdarg.h>
#include <sys/sem.h>

int ksync_sysv_semctl(int semid, int semnum, int cmd, unsigned long arg);

union semun_abi {
    int val;
    void *buf;
    unsigned short *array;
    void *info;
    unsigned long word;
};

int ksync_sysv_semctl_variadic(int semid, int semnum, int cmd, ...)
{
    union semun_abi arg;
    arg.word = 0;
    switch (cmd) {
    case SETVAL:
    case GETALL:
    case SETALL:
    case IPC_STAT:
    case IPC_SET:
    case SEM_STAT:
    case SEM_STAT_ANY:
    case IPC_INFO:
    case SEM_INFO: {
        va_list ap;
        va_start(ap, cmd);
        arg = va_arg(ap, union semun_abi);
        va_end(ap);
        break;
    }
    default:
        break;
    }
    /* SETVAL's int sits in the union's low bytes on these little-endian
     * targets; the Rust side takes the low 32 bits, as the kernel does. */
    return ksync_sysv_semctl(semid, semnum, cmd, arg.word);
}
