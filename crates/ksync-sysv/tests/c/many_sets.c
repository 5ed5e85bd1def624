/* More sets than the soft descriptor limit allows descriptors.
 *
 * The kernel's sets take no descriptor; the library keeps one open for every
 * set a process has used (its byte-range locks live there). With the soft
 * RLIMIT_NOFILE lowered to 64, the program creates and uses 200 sets, then
 * opens a file of its own: the library must raise the soft limit to the hard
 * one rather than answer ENOSPC, as the kernel would not. */
#include "common.h"
#include <fcntl.h>
#include <sys/resource.h>

#define SETS 200
#define SOFT 64

/* Whether the kernel would let this program create SETS more sets: SEMMNI
 * (the fourth figure of /proc/sys/kernel/sem) against the sets that exist. */
static int kernel_has_room(void)
{
    FILE *f = fopen("/proc/sys/kernel/sem", "r");
    long msl, mns, opm, mni;
    int got = f && fscanf(f, "%ld %ld %ld %ld", &msl, &mns, &opm, &mni) == 4;
    if (f)
        fclose(f);
    if (!got)
        return 0;
    long used = -1; /* the header line */
    f = fopen("/proc/sysvipc/sem", "r");
    if (f) {
        int c;
        while ((c = fgetc(f)) != EOF)
            used += c == '\n';
        fclose(f);
    }
    return mni - (used < 0 ? 0 : used) >= SETS;
}

int main(void)
{
    if (!kernel_has_room()) {
        printf("00 skipped: the kernel's SEMMNI leaves no room for %d sets\n", SETS);
        return 0;
    }
    struct rlimit lim;
    if (getrlimit(RLIMIT_NOFILE, &lim) != 0) {
        printf("FATAL getrlimit: %s\n", errno_name(errno));
        return 1;
    }
    if (lim.rlim_max < SETS + 2 * SOFT) {
        /* Nothing to raise the soft limit to: the same line both ways. */
        printf("00 skipped: the hard descriptor limit is below %d\n", SETS + 2 * SOFT);
        return 0;
    }
    lim.rlim_cur = SOFT;
    if (setrlimit(RLIMIT_NOFILE, &lim) != 0) {
        printf("FATAL setrlimit: %s\n", errno_name(errno));
        return 1;
    }
    int ids[SETS];
    int created = 0, first_errno = 0;
    for (int i = 0; i < SETS; i++) {
        ids[i] = semget(IPC_PRIVATE, 1, IPC_CREAT | 0600);
        if (ids[i] < 0) {
            first_errno = errno;
            break;
        }
        created++;
    }
    printf("01 sets created with the soft descriptor limit at %d: %d (%s)\n", SOFT, created,
           errno_name(first_errno));
    int done = 0;
    first_errno = 0;
    for (int i = 0; i < created; i++) {
        struct sembuf up = {0, 1, SEM_UNDO};
        if (semop(ids[i], &up, 1) == 0)
            done++;
        else if (!first_errno)
            first_errno = errno;
    }
    printf("02 semop with SEM_UNDO on each: %d (%s)\n", done, errno_name(first_errno));
    int fd = open("/dev/null", O_RDONLY);
    printf("03 a file of the program's own opens: %s\n", fd >= 0 ? "ok" : errno_name(errno));
    if (fd >= 0)
        close(fd);
    int removed = 0;
    for (int i = 0; i < created; i++)
        if (semctl(ids[i], 0, IPC_RMID) == 0)
            removed++;
    printf("04 sets removed: %d\n", removed);
    return 0;
}
