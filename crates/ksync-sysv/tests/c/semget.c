/* semget(2): the cases of LTP's semget01-06, written for this project.
 *  01  a new set with IPC_CREAT|IPC_EXCL: IPC_STAT shows nsems, mode, owner
 *  02  EACCES (nobody, mode 0600), EEXIST, ENOENT, EINVAL for nsems -1,
 *      SEMMSL+1 and more than the existing set has
 *  03  IPC_PRIVATE always makes a new set; nsems 0 on an existing key is "any"
 *  05  ENOSPC once SEMMNI sets exist (in a private IPC namespace with a small
 *      SEMMNI, so the machine's other users never see it)
 *  06  a new set's values are 0; IPC_CREAT without IPC_EXCL finds the set */
#include "common.h"
#include <sched.h>

static key_t shared_key;

static void nobody_opens(void *unused)
{
    (void)unused;
    expect_ok("02 semget as nobody, mode 0600 set", semget(shared_key, PSEMS, 0600));
}

static void semget05_enospc(void)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == -1)
        die("fork");
    if (pid == 0) {
        if (unshare(CLONE_NEWIPC) == -1) {
            printf("05 skipped: no private IPC namespace\n");
            fflush(stdout);
            _exit(0);
        }
        FILE *f = fopen("/proc/sys/kernel/sem", "w");
        if (f == NULL || fprintf(f, "32000 1024000000 500 4\n") < 0 || fclose(f) != 0) {
            printf("05 skipped: cannot set SEMMNI\n");
            fflush(stdout);
            _exit(0);
        }
        int made = 0, ids[5];
        for (int i = 0; i < 4; i++)
            if ((ids[made] = semget(IPC_PRIVATE, 1, IPC_CREAT | 0600)) != -1)
                made++;
        printf("05 sets made with SEMMNI 4: %d\n", made);
        int past = semget(IPC_PRIVATE, 1, IPC_CREAT | 0600);
        expect_ok("05 semget past SEMMNI", past);
        if (past != -1)
            ids[made++] = past;
        /* The namespace's end would free the kernel's sets; sets that live
         * elsewhere (libksync_sysv.so's files) must be removed. */
        for (int i = 0; i < made; i++)
            semctl(ids[i], 0, IPC_RMID);
        fflush(stdout);
        _exit(0);
    }
    waitpid(pid, NULL, 0);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    shared_key = private_key(1);

    /* 01 */
    int id = semget(shared_key, PSEMS, IPC_CREAT | IPC_EXCL | 0600);
    expect_ok("01 semget IPC_CREAT|IPC_EXCL", id);
    if (id == -1)
        return 1;
    struct semid_ds ds;
    union semun arg = { .buf = &ds };
    expect_ok("01 IPC_STAT", semctl(id, 0, IPC_STAT, arg));
    printf("01 sem_nsems: %lu\n", (unsigned long)ds.sem_nsems);
    printf("01 mode: %o\n", ds.sem_perm.mode & 0777);
    printf("01 cuid is euid: %d\n", ds.sem_perm.cuid == geteuid());
    printf("01 uid is euid: %d\n", ds.sem_perm.uid == geteuid());
    printf("01 cgid is egid: %d\n", ds.sem_perm.cgid == getegid());
    printf("01 sem_otime: %ld\n", (long)ds.sem_otime);
    printf("01 sem_ctime set: %d\n", ds.sem_ctime != 0);

    /* 06 */
    unsigned short vals[PSEMS];
    memset(vals, 0xff, sizeof vals);
    union semun all = { .array = vals };
    expect_ok("06 GETALL", semctl(id, 0, GETALL, all));
    int zero = 1;
    for (int i = 0; i < PSEMS; i++)
        zero &= vals[i] == 0;
    printf("06 new values all 0: %d\n", zero);
    int again = semget(shared_key, PSEMS, IPC_CREAT | 0600);
    printf("06 IPC_CREAT finds the same set: %d\n", again == id);

    /* 02 */
    if (is_root())
        as_nobody(nobody_opens, NULL);
    else
        printf("02 EACCES case skipped: not root\n");
    expect_ok("02 semget IPC_CREAT|IPC_EXCL existing", semget(shared_key, PSEMS, IPC_CREAT | IPC_EXCL | 0600));
    expect_ok("02 semget unknown key", semget(private_key(2), PSEMS, 0600));
    expect_ok("02 semget nsems -1", semget(private_key(3), -1, IPC_CREAT | 0600));
    expect_ok("02 semget nsems -1 existing", semget(shared_key, -1, 0600));
    expect_ok("02 semget nsems SEMMSL+1", semget(private_key(3), 32001, IPC_CREAT | 0600));
    expect_ok("02 semget nsems PSEMS+1 existing", semget(shared_key, PSEMS + 1, 0600));
    expect_ok("02 semget nsems 0 new", semget(private_key(3), 0, IPC_CREAT | 0600));

    /* 03 */
    printf("03 semget nsems 0 existing is that set: %d\n", semget(shared_key, 0, 0) == id);
    printf("03 semget nsems PSEMS-1 existing is that set: %d\n", semget(shared_key, PSEMS - 1, 0) == id);
    int p1 = new_set(1, 0600), p2 = new_set(1, 0600);
    printf("03 two IPC_PRIVATE sets differ: %d\n", p1 != p2);
    remove_set(p1);
    remove_set(p2);

    remove_set(id);
    expect_ok("semget after IPC_RMID without IPC_CREAT", semget(shared_key, PSEMS, 0600));

    semget05_enospc();
    return 0;
}
