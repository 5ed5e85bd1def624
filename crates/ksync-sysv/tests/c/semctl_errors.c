/* semctl(2)'s errors: the cases of LTP's semctl02-05, written for this project.
 *  02  EACCES: nobody reads a mode-0 set (IPC_STAT, GETVAL, GETALL, SEM_STAT;
 *      SEM_STAT_ANY needs no permission), or alters it (SETVAL)
 *  03  EINVAL for a bad command or semid, semnum out of range, IPC_SET to
 *      uid or gid -1; EFAULT for a bad buffer with IPC_STAT, IPC_SET,
 *      GETALL, SETALL, IPC_INFO
 *  04  EPERM: IPC_SET and IPC_RMID by someone who neither owns nor made it
 *  05  ERANGE: SETVAL -1, 32768, 65535 and SETALL with 65535, checked before
 *      the set is looked up for SETVAL */
#include "common.h"

static int g_id;

static void nobody_reads(void *unused)
{
    (void)unused;
    struct semid_ds ds;
    union semun arg = { .buf = &ds };
    expect_ok("02 IPC_STAT as nobody", semctl(g_id, 0, IPC_STAT, arg));
    expect_ok("02 GETVAL as nobody", semctl(g_id, 0, GETVAL));
    expect_ok("02 GETNCNT as nobody", semctl(g_id, 0, GETNCNT));
    unsigned short v[PSEMS];
    union semun all = { .array = v };
    expect_ok("02 GETALL as nobody", semctl(g_id, 0, GETALL, all));
    union semun one = { .val = 1 };
    expect_ok("02 SETVAL as nobody", semctl(g_id, 0, SETVAL, one));
    struct seminfo info;
    union semun iarg = { .__buf = &info };
    long max = semctl(0, 0, SEM_INFO, iarg);
    int stat_denied = 0, stat_any_found = 0;
    for (int index = 0; index <= max; index++) {
        if (semctl(index, 0, SEM_STAT_ANY, arg) == g_id)
            stat_any_found = 1;
        if (semctl(index, 0, SEM_STAT, arg) == -1 && errno == EACCES)
            stat_denied = 1;
    }
    printf("02 SEM_STAT as nobody is denied: %d\n", stat_denied);
    printf("02 SEM_STAT_ANY as nobody finds it: %d\n", stat_any_found);
}

static void nobody_changes(void *unused)
{
    (void)unused;
    struct semid_ds ds;
    union semun arg = { .buf = &ds };
    expect_ok("04 IPC_STAT as nobody", semctl(g_id, 0, IPC_STAT, arg));
    expect_ok("04 IPC_SET as nobody", semctl(g_id, 0, IPC_SET, arg));
    expect_ok("04 IPC_RMID as nobody", semctl(g_id, 0, IPC_RMID));
}

static void semctl02_04(void)
{
    if (!is_root()) {
        printf("02 and 04 skipped: not root\n");
        return;
    }
    g_id = new_set(PSEMS, 0);
    as_nobody(nobody_reads, NULL);
    remove_set(g_id);
    g_id = new_set(PSEMS, 0666);
    as_nobody(nobody_changes, NULL);
    /* Once nobody owns it, nobody may change and remove it. */
    struct semid_ds ds;
    union semun arg = { .buf = &ds };
    semctl(g_id, 0, IPC_STAT, arg);
    ds.sem_perm.uid = NOBODY_UID;
    expect_ok("04 IPC_SET uid nobody", semctl(g_id, 0, IPC_SET, arg));
    memset(&ds, 0, sizeof ds);
    semctl(g_id, 0, IPC_STAT, arg);
    printf("04 uid is nobody, cuid is still root: %d %d\n", ds.sem_perm.uid == NOBODY_UID, ds.sem_perm.cuid == 0);
    as_nobody(nobody_changes, NULL);
    expect_ok("04 IPC_STAT after nobody removed it", semctl(g_id, 0, IPC_STAT, arg));
}

static void semctl03(void)
{
    int id = new_set(PSEMS, 0600);
    struct semid_ds ds;
    union semun arg = { .buf = &ds };
    expect_ok("03 cmd -1", semctl(id, 0, -1, arg));
    expect_ok("03 cmd 21", semctl(id, 0, 21, arg));
    expect_ok("03 cmd 4", semctl(id, 0, 4, arg));
    expect_ok("03 semid -1 IPC_STAT", semctl(-1, 0, IPC_STAT, arg));
    expect_ok("03 semid -1 GETVAL", semctl(-1, 0, GETVAL));
    expect_ok("03 semid -1 IPC_RMID", semctl(-1, 0, IPC_RMID));
    expect_ok("03 unused semid GETVAL", semctl(id + 1, 0, GETVAL));
    expect_ok("03 GETVAL semnum PSEMS", semctl(id, PSEMS, GETVAL));
    expect_ok("03 GETVAL semnum -1", semctl(id, -1, GETVAL));
    expect_ok("03 GETPID semnum PSEMS", semctl(id, PSEMS, GETPID));
    expect_ok("03 GETNCNT semnum PSEMS", semctl(id, PSEMS, GETNCNT));
    expect_ok("03 GETZCNT semnum -1", semctl(id, -1, GETZCNT));
    union semun one = { .val = 1 };
    expect_ok("03 SETVAL semnum PSEMS", semctl(id, PSEMS, SETVAL, one));
    expect_ok("03 IPC_STAT semnum PSEMS is ignored", semctl(id, PSEMS, IPC_STAT, arg));

    union semun bad = { .buf = BAD_ADDR };
    expect_ok("03 IPC_STAT bad buffer", semctl(id, 0, IPC_STAT, bad));
    expect_ok("03 IPC_SET bad buffer", semctl(id, 0, IPC_SET, bad));
    expect_ok("03 GETALL bad buffer", semctl(id, 0, GETALL, bad));
    expect_ok("03 SETALL bad buffer", semctl(id, 0, SETALL, bad));
    expect_ok("03 IPC_INFO bad buffer", semctl(id, 0, IPC_INFO, bad));
    expect_ok("03 SEM_INFO bad buffer", semctl(id, 0, SEM_INFO, bad));
    expect_ok("03 GETALL bad buffer, semid -1", semctl(-1, 0, GETALL, bad));
    expect_ok("03 IPC_SET bad buffer, semid -1", semctl(-1, 0, IPC_SET, bad));
    expect_ok("03 SETALL bad buffer, semid -1", semctl(-1, 0, SETALL, bad));
    union semun null = { .buf = NULL };
    expect_ok("03 GETALL NULL", semctl(id, 0, GETALL, null));
    expect_ok("03 GETVAL ignores a bad buffer", semctl(id, 0, GETVAL, bad));
    struct semid_ds owner;
    union semun oarg = { .buf = &owner };
    expect_ok("03 IPC_STAT for IPC_SET", semctl(id, 0, IPC_STAT, oarg));
    owner.sem_perm.uid = (uid_t)-1;
    expect_ok("03 IPC_SET uid -1", semctl(id, 0, IPC_SET, oarg));
    expect_ok("03 IPC_STAT for IPC_SET", semctl(id, 0, IPC_STAT, oarg));
    owner.sem_perm.gid = (gid_t)-1;
    expect_ok("03 IPC_SET gid -1", semctl(id, 0, IPC_SET, oarg));
    remove_set(id);
    expect_ok("03 IPC_STAT bad buffer, removed set", semctl(id, 0, IPC_STAT, bad));
}

static void semctl05(void)
{
    int id = new_set(PSEMS, 0600);
    union semun v = { .val = -1 };
    expect_ok("05 SETVAL -1", semctl(id, 0, SETVAL, v));
    v.val = 32768;
    expect_ok("05 SETVAL 32768", semctl(id, 0, SETVAL, v));
    v.val = 65535;
    expect_ok("05 SETVAL 65535", semctl(id, 0, SETVAL, v));
    v.val = 32767;
    expect_ok("05 SETVAL 32767", semctl(id, 0, SETVAL, v));
    show("05 GETVAL", semctl(id, 0, GETVAL));
    v.val = -1;
    expect_ok("05 SETVAL -1, semid -1", semctl(-1, 0, SETVAL, v));
    expect_ok("05 SETVAL -1, semnum out of range", semctl(id, PSEMS, SETVAL, v));
    unsigned short vals[PSEMS] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 65535 };
    union semun all = { .array = vals };
    expect_ok("05 SETALL with 65535", semctl(id, 0, SETALL, all));
    unsigned short got[PSEMS];
    union semun gall = { .array = got };
    semctl(id, 0, GETALL, gall);
    printf("05 values after the refused SETALL: %u %u\n", got[0], got[PSEMS - 1]);
    vals[PSEMS - 1] = 32767;
    expect_ok("05 SETALL with 32767", semctl(id, 0, SETALL, all));
    remove_set(id);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    semctl02_04();
    semctl03();
    semctl05();
    return 0;
}
