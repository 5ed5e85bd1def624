/* semctl(2), one command at a time: the cases of LTP's semctl01 and semctl07,
 * written for this project.
 *  01  IPC_STAT, IPC_SET, GETALL, GETNCNT (5 sleepers), GETPID (a child's
 *      increment), GETVAL, GETZCNT (5 sleepers), SETALL, SETVAL, IPC_INFO,
 *      SEM_INFO, SEM_STAT, SEM_STAT_ANY, IPC_RMID (then semop gives EINVAL);
 *      killed sleepers leave GETNCNT/GETZCNT
 *  07  IPC_STAT's owner fields are the caller's; SETVAL then GETVAL and
 *      GETPID; GETNCNT and GETZCNT are 0 with nobody waiting */
#include "common.h"

static void spawn_sleepers(int id, struct sembuf op, pid_t *kids, int n)
{
    fflush(stdout);
    for (int i = 0; i < n; i++) {
        kids[i] = fork();
        if (kids[i] == -1)
            die("fork");
        if (kids[i] == 0) {
            semop(id, &op, 1);
            _exit(0);
        }
    }
}

static void kill_all(pid_t *kids, int n)
{
    for (int i = 0; i < n; i++)
        kill(kids[i], SIGKILL);
    for (int i = 0; i < n; i++)
        waitpid(kids[i], NULL, 0);
}

static void show_all(const char *what, int id)
{
    unsigned short v[PSEMS];
    union semun arg = { .array = v };
    expect_ok(what, semctl(id, 0, GETALL, arg));
    printf("%s values:", what);
    for (int i = 0; i < PSEMS; i++)
        printf(" %u", v[i]);
    printf("\n");
}

static void semctl01(void)
{
    int id = new_set(PSEMS, 0600);
    struct semid_ds ds;
    union semun arg = { .buf = &ds };

    expect_ok("01 IPC_STAT", semctl(id, 0, IPC_STAT, arg));
    printf("01 IPC_STAT nsems %lu mode %o\n", (unsigned long)ds.sem_nsems, ds.sem_perm.mode & 0777);
    time_t ctime_before = ds.sem_ctime;

    ds.sem_perm.mode = (ds.sem_perm.mode & ~0777) | 0666;
    expect_ok("01 IPC_SET mode 0666", semctl(id, 0, IPC_SET, arg));
    memset(&ds, 0, sizeof ds);
    semctl(id, 0, IPC_STAT, arg);
    printf("01 mode after IPC_SET: %o\n", ds.sem_perm.mode & 0777);
    printf("01 ctime kept or advanced: %d\n", ds.sem_ctime >= ctime_before);
    ds.sem_perm.mode = 0x7000 | 0640; /* only the low nine bits count */
    expect_ok("01 IPC_SET mode with high bits", semctl(id, 0, IPC_SET, arg));
    semctl(id, 0, IPC_STAT, arg);
    printf("01 mode after IPC_SET with high bits: %o\n", ds.sem_perm.mode & 0777);

    show_all("01 GETALL", id);

    pid_t kids[5];
    struct sembuf down = { 4, -1, 0 };
    spawn_sleepers(id, down, kids, 5);
    wait_sleepers(id, 4, GETNCNT, 5);
    show("01 GETNCNT with 5 sleepers", semctl(id, 4, GETNCNT));
    show("01 GETZCNT on that semaphore", semctl(id, 4, GETZCNT));
    show("01 GETNCNT on another semaphore", semctl(id, 3, GETNCNT));
    kill_all(kids, 5);
    show("01 GETNCNT after SIGKILL", semctl(id, 4, GETNCNT));

    fflush(stdout);
    pid_t child = fork();
    if (child == -1)
        die("fork");
    if (child == 0) {
        struct sembuf up = { 2, 1, 0 };
        _exit(semop(id, &up, 1) == 0 ? 0 : 1);
    }
    waitpid(child, NULL, 0);
    long who = semctl(id, 2, GETPID);
    printf("01 GETPID is the child's pid: %d\n", who == child);
    show("01 GETPID of an untouched semaphore", semctl(id, 5, GETPID));
    show("01 GETVAL", semctl(id, 2, GETVAL));

    union semun one = { .val = 1 };
    expect_ok("01 SETVAL sem 4 to 1", semctl(id, 4, SETVAL, one));
    struct sembuf zwait = { 4, 0, 0 };
    spawn_sleepers(id, zwait, kids, 5);
    wait_sleepers(id, 4, GETZCNT, 5);
    show("01 GETZCNT with 5 sleepers", semctl(id, 4, GETZCNT));
    show("01 GETNCNT on that semaphore", semctl(id, 4, GETNCNT));
    kill_all(kids, 5);
    show("01 GETZCNT after SIGKILL", semctl(id, 4, GETZCNT));

    unsigned short threes[PSEMS];
    for (int i = 0; i < PSEMS; i++)
        threes[i] = 3;
    union semun all = { .array = threes };
    expect_ok("01 SETALL 3", semctl(id, 0, SETALL, all));
    show_all("01 GETALL after SETALL", id);
    printf("01 GETPID after SETALL is caller: %d\n", semctl(id, 7, GETPID) == getpid());

    union semun two = { .val = 2 };
    expect_ok("01 SETVAL sem 4 to 2", semctl(id, 4, SETVAL, two));
    show("01 GETVAL sem 4", semctl(id, 4, GETVAL));

    struct seminfo info;
    union semun iarg = { .__buf = &info };
    long max_index = semctl(id, 0, IPC_INFO, iarg);
    printf("01 IPC_INFO highest index >= 0: %d\n", max_index >= 0);
    printf("01 IPC_INFO semmsl %d semopm %d semvmx %d semaem %d semusz %d\n", info.semmsl, info.semopm,
           info.semvmx, info.semaem, info.semusz);
    long sem_info_max = semctl(id, 0, SEM_INFO, iarg);
    printf("01 SEM_INFO highest index >= 0: %d\n", sem_info_max >= 0);
    printf("01 SEM_INFO semusz >= 1: %d\n", info.semusz >= 1);
    printf("01 SEM_INFO semaem >= PSEMS: %d\n", info.semaem >= PSEMS);

    int found = 0, found_any = 0;
    for (int index = 0; index <= sem_info_max; index++) {
        struct semid_ds sds;
        union semun sarg = { .buf = &sds };
        if (semctl(index, 0, SEM_STAT, sarg) == id)
            found = 1;
        if (semctl(index, 0, SEM_STAT_ANY, sarg) == id)
            found_any = sds.sem_nsems == PSEMS;
    }
    printf("01 SEM_STAT finds the set by index: %d\n", found);
    printf("01 SEM_STAT_ANY finds the set by index: %d\n", found_any);

    expect_ok("01 IPC_RMID", semctl(id, 0, IPC_RMID));
    struct sembuf op = { 0, 1, 0 };
    expect_ok("01 semop after IPC_RMID", semop(id, &op, 1));
    expect_ok("01 GETVAL after IPC_RMID", semctl(id, 0, GETVAL));
    expect_ok("01 IPC_RMID again", semctl(id, 0, IPC_RMID));
}

static void semctl07(void)
{
    int id = new_set(PSEMS, 0600);
    struct semid_ds ds;
    union semun arg = { .buf = &ds };
    expect_ok("07 IPC_STAT", semctl(id, 0, IPC_STAT, arg));
    printf("07 nsems %lu\n", (unsigned long)ds.sem_nsems);
    printf("07 uid %d gid %d cuid %d cgid %d are the caller's\n", ds.sem_perm.uid == geteuid(),
           ds.sem_perm.gid == getegid(), ds.sem_perm.cuid == geteuid(), ds.sem_perm.cgid == getegid());
    show("07 GETVAL", semctl(id, 0, GETVAL));
    union semun one = { .val = 1 };
    expect_ok("07 SETVAL 1", semctl(id, 0, SETVAL, one));
    show("07 GETVAL after SETVAL", semctl(id, 0, GETVAL));
    printf("07 GETPID after SETVAL is caller: %d\n", semctl(id, 0, GETPID) == getpid());
    show("07 GETNCNT", semctl(id, 0, GETNCNT));
    show("07 GETZCNT", semctl(id, 0, GETZCNT));
    show("07 GETVAL last semaphore", semctl(id, PSEMS - 1, GETVAL));
    remove_set(id);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    semctl01();
    semctl07();
    return 0;
}
