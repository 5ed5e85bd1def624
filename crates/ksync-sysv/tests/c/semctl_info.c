/* IPC_INFO, SEM_INFO, SEM_STAT and SEM_STAT_ANY across the whole table: the
 * case of LTP's semctl09, written for this project, in a private IPC
 * namespace so that other users of the machine cannot change the counts.
 * SEM_INFO's highest index bounds every index SEM_STAT_ANY accepts; counting
 * them gives semusz; semusz and semaem are the sets and semaphores in use and
 * agree with the system's list of sets (/proc/sysvipc/sem, or the library's
 * folder of set files); nobody may SEM_STAT_ANY a mode-0 set but not
 * SEM_STAT it.
 * (LTP's semctl08 checks that IPC_STAT clears the padding beside the 32-bit
 * time fields; struct semid_ds on x86-64 and AArch64 has no such padding, so
 * there is nothing to check there.) */
#include "common.h"
#include <dirent.h>
#include <dlfcn.h>
#include <sched.h>

/* How many sets the system lists: the lines of /proc/sysvipc/sem for the
 * kernel's sets; under libksync_sysv.so with its own sets (unless
 * KSYNC_SYSV_BACKEND=kernel passes the calls through), whose sets are files
 * sem.<id> in $KSYNC_SEM_DIR (default /dev/shm/ksync-sem) and never appear
 * in /proc, those files. -1 if the list cannot be read. */
static int listed_sets(void)
{
    Dl_info who;
    const char *backend = getenv("KSYNC_SYSV_BACKEND");
    if (dladdr((void *)semget, &who) != 0 && who.dli_fname != NULL &&
        strstr(who.dli_fname, "libksync_sysv") != NULL &&
        (backend == NULL || strcmp(backend, "kernel") != 0)) {
        const char *dir = getenv("KSYNC_SEM_DIR");
        DIR *d = opendir(dir != NULL && *dir != '\0' ? dir : "/dev/shm/ksync-sem");
        if (d == NULL)
            return -1;
        int sets = 0;
        struct dirent *e;
        while ((e = readdir(d)) != NULL)
            sets += strncmp(e->d_name, "sem.", 4) == 0;
        closedir(d);
        return sets;
    }
    FILE *f = fopen("/proc/sysvipc/sem", "r");
    if (f == NULL)
        return -1;
    char line[512];
    int lines = -1; /* the header */
    while (fgets(line, sizeof line, f) != NULL)
        lines++;
    fclose(f);
    return lines;
}

static void scan(const char *who)
{
    struct seminfo info;
    union semun iarg = { .__buf = &info };
    long max = semctl(0, 0, SEM_INFO, iarg);
    printf("09 %s SEM_INFO highest index: %ld\n", who, max);
    printf("09 %s SEM_INFO semusz %d semaem %d\n", who, info.semusz, info.semaem);
    int any = 0, stat = 0, denied = 0, nsems = 0;
    for (int index = 0; index <= max + 2; index++) {
        struct semid_ds ds;
        union semun arg = { .buf = &ds };
        if (semctl(index, 0, SEM_STAT_ANY, arg) != -1) {
            any++;
            nsems += ds.sem_nsems;
            if (index > max)
                printf("09 %s SEM_STAT_ANY past the highest index\n", who);
        }
        if (semctl(index, 0, SEM_STAT, arg) != -1)
            stat++;
        else if (errno == EACCES)
            denied++;
    }
    printf("09 %s SEM_STAT_ANY sets %d semaphores %d\n", who, any, nsems);
    printf("09 %s SEM_STAT sets %d denied %d\n", who, stat, denied);
    int listed = listed_sets();
    if (listed != -1)
        printf("09 %s listed sets: %d\n", who, listed);
}

static void as_nobody_scan(void *unused)
{
    (void)unused;
    scan("nobody");
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (unshare(CLONE_NEWIPC) == -1) {
        printf("09 skipped: no private IPC namespace\n");
        return 0;
    }
    struct seminfo info;
    union semun iarg = { .__buf = &info };
    show("09 IPC_INFO in an empty namespace", semctl(0, 0, IPC_INFO, iarg));
    show("09 SEM_INFO in an empty namespace", semctl(0, 0, SEM_INFO, iarg));
    printf("09 empty SEM_INFO semusz %d semaem %d\n", info.semusz, info.semaem);
    int a = new_set(1, 0600), b = new_set(2, 0), c = new_set(3, 0644);
    scan("root");
    if (is_root())
        as_nobody(as_nobody_scan, NULL);
    remove_set(b);
    scan("root after removing the middle set");
    remove_set(a);
    remove_set(c);
    return 0;
}
