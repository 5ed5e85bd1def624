/* Who may do what with a set its mode shuts a process out of, as the kernel
 * decides it: ipcperms() checks only the rights a call asks for, after the
 * checks that come first, and IPC_SET/IPC_RMID go by ownership, not mode.
 *  01  nobody and a root-owned mode-0600 set: semget finds it when the flags
 *      ask for no right, EEXIST, EINVAL for nsems, EACCES for the rights
 *      asked for; semop's EFBIG before EACCES; semctl's EACCES for reads
 *      and writes, SETVAL's ERANGE and EINVAL (number) before EACCES, EPERM
 *      for IPC_SET and IPC_RMID
 *  02  an owner its own mode shuts out (a non-root creator, mode 0, in
 *      another process of its user): EACCES for reads and writes, yet
 *      IPC_SET and IPC_RMID by ownership
 *  03  a reader whose rights grow: nobody reads a 0644 set and counts its
 *      sleepers, is refused writes, then writes, and sleeps in the queue, once the owner's
 *      IPC_SET makes it 0666; refused again at 0644
 *  04  a writer that may not read (0622): the kernel lets nobody alter the
 *      set (the shared sets cannot: see the test's differences)
 *  05  an owner the set's file does not name: a non-root creator gives its
 *      set to nobody, which the kernel then treats as the owner (the
 *      shared sets cannot: only CAP_CHOWN changes a file's owner); the
 *      creator still removes it; given a 0666 set, the new owner removes it
 *      (on the shared sets too, though it may not unlink the set's file:
 *      the creator's next semget of the key tidies the folder)
 *  06  root without CAP_IPC_OWNER and CAP_SYS_ADMIN in its effective set:
 *      the kernel asks for the capabilities, not for user id 0, so its
 *      own mode-0 set refuses it reads and writes (SEM_STAT_ANY, which
 *      checks no right, still reads it), nobody's 0666 set refuses it
 *      IPC_SET and IPC_RMID, and ownership still lets it IPC_SET its own
 *  07  nobody keeping CAP_IPC_OWNER (PR_SET_KEEPCAPS, setuid, capset):
 *      past the mode bits of its own mode-0 set, past semget's check of
 *      root's mode-0 set, and past its reads and writes when it also keeps
 *      CAP_DAC_OVERRIDE (without it the shared sets cannot open root's
 *      file). Skipped where root has no CAP_IPC_OWNER to keep (a default
 *      Docker container).
 *
 * Each unprivileged process is forked before its set exists, so that it
 * finds the set on its own (no handle inherited from root). */
#include "common.h"
#include <grp.h>
#include <linux/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

/* A user and group no process of the machine runs as. */
#define OTHER_UID 4242
#define OTHER_GID 4242

/* A child with other credentials, and the pipes to talk to it. */
struct peer {
    pid_t pid;
    int to_child;
    int from_child;
    int in;  /* the child's ends */
    int out;
};

static void put(int fd, int v)
{
    if (write(fd, &v, sizeof v) != (ssize_t)sizeof v)
        die("write(pipe)");
}

static int get(int fd)
{
    int v;
    if (read(fd, &v, sizeof v) != (ssize_t)sizeof v)
        die("read(pipe)");
    return v;
}

/* The calling thread's capabilities (version 3: two words per set), with
 * the raw system calls, so that no libcap is needed. */
static int caps_get(struct __user_cap_data_struct data[2])
{
    struct __user_cap_header_struct header = { _LINUX_CAPABILITY_VERSION_3, 0 };
    return (int)syscall(SYS_capget, &header, data);
}

static int caps_set(struct __user_cap_data_struct data[2])
{
    struct __user_cap_header_struct header = { _LINUX_CAPABILITY_VERSION_3, 0 };
    return (int)syscall(SYS_capset, &header, data);
}

#define CAP_BIT(cap) (1u << ((cap) % 32))

/* Whether capability `cap` (below 32) is in the effective set. */
static int has_cap(int cap)
{
    struct __user_cap_data_struct data[2];
    if (caps_get(data) == -1)
        die("capget");
    return (data[0].effective & CAP_BIT(cap)) != 0;
}

/* Whether the capabilities in `caps` (bits below 32) are all permitted. */
static int may_keep(unsigned caps)
{
    struct __user_cap_data_struct data[2];
    if (caps_get(data) == -1)
        die("capget");
    return (data[0].permitted & caps) == caps;
}

/* Forks a child that drops every group and becomes uid/gid, keeping of its
 * capabilities only those in `keep` (bits below 32: PR_SET_KEEPCAPS keeps
 * the permitted set across setuid, capset makes them effective), then
 * runs fn. With keep 0, setuid alone decides, as for any process. */
static void start_keeping(struct peer *p, uid_t uid, gid_t gid, unsigned keep,
                          void (*fn)(struct peer *))
{
    int down[2], up[2];
    if (pipe(down) == -1 || pipe(up) == -1)
        die("pipe");
    fflush(stdout);
    p->pid = fork();
    if (p->pid == -1)
        die("fork");
    if (p->pid == 0) {
        close(down[1]);
        close(up[0]);
        p->in = down[0];
        p->out = up[1];
        if (keep != 0 && prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) == -1)
            die("prctl(PR_SET_KEEPCAPS)");
        if (setgroups(0, NULL) == -1 || setgid(gid) == -1 || setuid(uid) == -1)
            die("setuid");
        if (keep != 0) {
            struct __user_cap_data_struct data[2];
            if (caps_get(data) == -1)
                die("capget");
            data[0].permitted &= keep;
            data[0].effective = data[0].permitted;
            data[0].inheritable = 0;
            memset(&data[1], 0, sizeof data[1]);
            if (caps_set(data) == -1)
                die("capset");
        }
        fn(p);
        fflush(stdout);
        _exit(0);
    }
    close(down[0]);
    close(up[1]);
    p->to_child = down[1];
    p->from_child = up[0];
}

static void start(struct peer *p, uid_t uid, gid_t gid, void (*fn)(struct peer *))
{
    start_keeping(p, uid, gid, 0, fn);
}

static void finish(struct peer *p)
{
    int status;
    close(p->to_child);
    close(p->from_child);
    if (waitpid(p->pid, &status, 0) == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        printf("child died\n");
}

static int op(int id, int num, int value, int flags)
{
    struct sembuf sb = { (unsigned short)num, (short)value, (short)flags };
    return semop(id, &sb, 1);
}

static int set_value(int id, int num, int value)
{
    union semun arg = { .val = value };
    return semctl(id, num, SETVAL, arg);
}

/* IPC_SET with a buffer built from scratch: the caller may not read the
 * set's own (IPC_STAT). */
static int set_perm(int id, uid_t uid, gid_t gid, int mode)
{
    struct semid_ds ds;
    memset(&ds, 0, sizeof ds);
    ds.sem_perm.uid = uid;
    ds.sem_perm.gid = gid;
    ds.sem_perm.mode = mode;
    union semun arg = { .buf = &ds };
    return semctl(id, 0, IPC_SET, arg);
}

/* The read and write calls a shut-out process is refused. */
static void refused(const char *tag, int id)
{
    char what[96];
    struct semid_ds ds;
    union semun arg = { .buf = &ds };
    unsigned short values[PSEMS] = { 0 };
    union semun all = { .array = values };
#define CALL(label, call) (snprintf(what, sizeof what, "%s %s", tag, label), expect_ok(what, call))
    CALL("IPC_STAT", semctl(id, 0, IPC_STAT, arg));
    CALL("GETVAL", semctl(id, 0, GETVAL));
    CALL("GETVAL number out of range", semctl(id, PSEMS, GETVAL));
    CALL("GETALL", semctl(id, 0, GETALL, all));
    CALL("GETNCNT", semctl(id, 0, GETNCNT));
    CALL("GETZCNT", semctl(id, 0, GETZCNT));
    CALL("GETPID", semctl(id, 0, GETPID));
    CALL("SETVAL", set_value(id, 0, 1));
    CALL("SETVAL number out of range", set_value(id, PSEMS, 1));
    CALL("SETVAL -1", set_value(id, 0, -1));
    CALL("SETALL", semctl(id, 0, SETALL, all));
    CALL("semop +1", op(id, 0, 1, IPC_NOWAIT));
    CALL("semop wait for zero", op(id, 0, 0, IPC_NOWAIT));
    CALL("semop number out of range", op(id, PSEMS, 1, IPC_NOWAIT));
#undef CALL
}

static key_t g_key, g_owners_key, g_given_key, g_open_key, g_caps_key;

static void nobody_and_a_closed_set(struct peer *p)
{
    int id = get(p->in);
    printf("01 semget(key, 0, 0) is the set: %d\n", semget(g_key, 0, 0) == id);
    printf("01 semget(key, PSEMS, 0) is the set: %d\n", semget(g_key, PSEMS, 0) == id);
    printf("01 semget(key, 0, IPC_CREAT) is the set: %d\n", semget(g_key, 0, IPC_CREAT) == id);
    expect_ok("01 semget nsems PSEMS+1", semget(g_key, PSEMS + 1, 0));
    expect_ok("01 semget asking read", semget(g_key, 0, 0400));
    expect_ok("01 semget asking alter", semget(g_key, 0, 0020));
    expect_ok("01 semget IPC_CREAT|IPC_EXCL", semget(g_key, 0, IPC_CREAT | IPC_EXCL | 0600));
    expect_ok("01 semget IPC_CREAT|IPC_EXCL nsems PSEMS+1", semget(g_key, PSEMS + 1, IPC_CREAT | IPC_EXCL | 0600));
    refused("01 nobody", id);
    expect_ok("01 IPC_SET by nobody", set_perm(id, NOBODY_UID, NOBODY_GID, 0666));
    expect_ok("01 IPC_RMID by nobody", semctl(id, 0, IPC_RMID));
    put(p->out, 1);
}

static void perm01(void)
{
    struct peer p;
    start(&p, NOBODY_UID, NOBODY_GID, nobody_and_a_closed_set);
    int id = semget(g_key, PSEMS, IPC_CREAT | IPC_EXCL | 0600);
    if (id == -1)
        die("semget(key)");
    put(p.to_child, id);
    get(p.from_child);
    finish(&p);
    remove_set(id);
}

static void an_owner_creates(struct peer *p)
{
    (void)p;
    expect_ok("02 semget IPC_CREAT mode 0", semget(g_owners_key, PSEMS, IPC_CREAT | IPC_EXCL | 0));
}

/* Another process of the creator's user, which finds the set by key. */
static void an_owner_shut_out(struct peer *p)
{
    (void)p;
    key_t key = g_owners_key;
    int id = semget(key, 0, 0);
    expect_ok("02 semget(key, 0, 0) by the owner", id);
    if (id == -1)
        return;
    expect_ok("02 semget asking read", semget(key, 0, 0400));
    expect_ok("02 semget IPC_CREAT|IPC_EXCL", semget(key, 0, IPC_CREAT | IPC_EXCL | 0600));
    refused("02 owner", id);
    expect_ok("02 IPC_SET mode 0600 by the owner", set_perm(id, OTHER_UID, OTHER_GID, 0600));
    expect_ok("02 SETVAL after", set_value(id, 0, 5));
    show("02 GETVAL after", semctl(id, 0, GETVAL));
    expect_ok("02 IPC_SET mode 0 by the owner", set_perm(id, OTHER_UID, OTHER_GID, 0));
    expect_ok("02 GETVAL at mode 0 again", semctl(id, 0, GETVAL));
    expect_ok("02 IPC_RMID at mode 0 by the owner", semctl(id, 0, IPC_RMID));
    expect_ok("02 semget after IPC_RMID", semget(key, 0, 0));
}

static void perm02(void)
{
    struct peer p;
    start(&p, OTHER_UID, OTHER_GID, an_owner_creates);
    finish(&p);
    start(&p, OTHER_UID, OTHER_GID, an_owner_shut_out);
    finish(&p);
}

static void a_reader_gains_rights(struct peer *p)
{
    int id = get(p->in);
    show("03 GETVAL at 0644", semctl(id, 0, GETVAL));
    show("03 GETNCNT at 0644", semctl(id, 0, GETNCNT));
    show("03 GETZCNT at 0644", semctl(id, 0, GETZCNT));
    expect_ok("03 SETVAL at 0644", set_value(id, 0, 1));
    expect_ok("03 semop +1 at 0644", op(id, 0, 1, IPC_NOWAIT));
    put(p->out, 1);
    get(p->in); /* the owner made it 0666 */
    expect_ok("03 SETVAL at 0666", set_value(id, 0, 1));
    expect_ok("03 semop +1 at 0666", op(id, 0, 1, IPC_NOWAIT));
    show("03 GETVAL at 0666", semctl(id, 0, GETVAL));
    put(p->out, 1);
    /* Queued, so GETZCNT counts it: the owner waits for that. */
    expect_ok("03 semop wait for zero at 0666", op(id, 0, 0, 0));
    put(p->out, 1);
    get(p->in); /* back to 0644 */
    expect_ok("03 SETVAL at 0644 again", set_value(id, 0, 1));
    show("03 GETVAL at 0644 again", semctl(id, 0, GETVAL));
    put(p->out, 1);
}

static void perm03(void)
{
    struct peer p;
    start(&p, NOBODY_UID, NOBODY_GID, a_reader_gains_rights);
    int id = new_set(1, 0644);
    /* A sleeper for the reader to count (root's, forked after the set). */
    fflush(stdout);
    pid_t sleeper = fork();
    if (sleeper == -1)
        die("fork");
    if (sleeper == 0)
        _exit(op(id, 0, -1, 0) == 0 ? 0 : 1);
    if (!wait_sleepers(id, 0, GETNCNT, 1))
        return;
    put(p.to_child, id);
    get(p.from_child);
    expect_ok("03 semop +1 lets the sleeper go", op(id, 0, 1, 0));
    int status;
    waitpid(sleeper, &status, 0);
    printf("03 the sleeper took it: %d\n", WIFEXITED(status) && WEXITSTATUS(status) == 0);
    expect_ok("03 IPC_SET mode 0666 by the owner", set_perm(id, 0, 0, 0666));
    put(p.to_child, 1);
    get(p.from_child);
    printf("03 the reader sleeps in the queue: %d\n", wait_sleepers(id, 0, GETZCNT, 1));
    int woke = set_value(id, 0, 0);
    get(p.from_child); /* the child has printed its semop's outcome */
    expect_ok("03 SETVAL 0 wakes it", woke);
    expect_ok("03 IPC_SET mode 0644 by the owner", set_perm(id, 0, 0, 0644));
    put(p.to_child, 1);
    get(p.from_child);
    finish(&p);
    remove_set(id);
}

static void a_writer_that_may_not_read(struct peer *p)
{
    int id = get(p->in);
    expect_ok("04 semop +1 at 0622", op(id, 0, 1, IPC_NOWAIT));
    expect_ok("04 SETVAL at 0622", set_value(id, 0, 3));
    expect_ok("04 GETVAL at 0622", semctl(id, 0, GETVAL));
    expect_ok("04 IPC_RMID at 0622", semctl(id, 0, IPC_RMID));
    put(p->out, 1);
}

static void perm04(void)
{
    struct peer p;
    start(&p, NOBODY_UID, NOBODY_GID, a_writer_that_may_not_read);
    int id = new_set(1, 0622);
    put(p.to_child, id);
    get(p.from_child);
    finish(&p);
    remove_set(id);
}

static void a_creator_gives_it_away(struct peer *p)
{
    (void)p;
    int id = semget(g_given_key, 1, IPC_CREAT | IPC_EXCL | 0600);
    expect_ok("05 semget by the creator", id);
    expect_ok("05 IPC_SET uid nobody by the creator", set_perm(id, NOBODY_UID, NOBODY_GID, 0600));
}

static void the_new_owner(struct peer *p)
{
    (void)p;
    int id = semget(g_given_key, 0, 0);
    expect_ok("05 semget(key, 0, 0) by the new owner", id);
    expect_ok("05 GETVAL by the new owner", semctl(id, 0, GETVAL));
    expect_ok("05 IPC_SET by the new owner", set_perm(id, NOBODY_UID, NOBODY_GID, 0600));
}

static void the_creator_removes_it(struct peer *p)
{
    (void)p;
    expect_ok("05 IPC_RMID by the creator", semctl(semget(g_given_key, 0, 0), 0, IPC_RMID));
}

static void a_creator_gives_an_open_set_away(struct peer *p)
{
    (void)p;
    int id = semget(g_open_key, 1, IPC_CREAT | IPC_EXCL | 0666);
    expect_ok("05 semget of a 0666 set by the creator", id);
    expect_ok("05 IPC_SET uid nobody of the 0666 set", set_perm(id, NOBODY_UID, NOBODY_GID, 0666));
}

static void the_new_owner_removes_it(struct peer *p)
{
    (void)p;
    int id = semget(g_open_key, 0, 0);
    expect_ok("05 IPC_RMID of the 0666 set by its new owner", semctl(id, 0, IPC_RMID));
}

static void the_creator_looks_again(struct peer *p)
{
    (void)p;
    int id = semget(g_open_key, 0, 0);
    expect_ok("05 semget of the 0666 set by the creator after that", id);
    expect_ok("05 semop +1 on it", op(id, 0, 1, IPC_NOWAIT));
    expect_ok("05 IPC_RMID of it by the creator", semctl(id, 0, IPC_RMID));
}

static void perm05(void)
{
    struct peer p;
    start(&p, OTHER_UID, OTHER_GID, a_creator_gives_it_away);
    finish(&p);
    start(&p, NOBODY_UID, NOBODY_GID, the_new_owner);
    finish(&p);
    start(&p, OTHER_UID, OTHER_GID, the_creator_removes_it);
    finish(&p);
    /* The same with a mode that lets the new owner write the set's file,
     * but not unlink it (the sets' folder is sticky, the file the
     * creator's): the set is removed all the same. */
    start(&p, OTHER_UID, OTHER_GID, a_creator_gives_an_open_set_away);
    finish(&p);
    start(&p, NOBODY_UID, NOBODY_GID, the_new_owner_removes_it);
    finish(&p);
    start(&p, OTHER_UID, OTHER_GID, the_creator_looks_again);
    finish(&p);
}

/* The index SEM_STAT_ANY finds set `id` at, -1 if at none: SEM_INFO's
 * highest index bounds the walk. */
static int stat_any_index(int id)
{
    struct seminfo info;
    union semun arg = { .__buf = &info };
    int highest = semctl(0, 0, SEM_INFO, arg);
    for (int i = 0; i <= highest; i++) {
        struct semid_ds ds;
        union semun buf = { .buf = &ds };
        if (semctl(i, 0, SEM_STAT_ANY, buf) == id)
            return i;
    }
    return -1;
}

/* A nobody process that creates a set of mode `mode` and hands its id up. */
static int g_nobody_mode;

static void nobody_creates(struct peer *p)
{
    put(p->out, new_set(1, g_nobody_mode));
}

static int nobodys_set(int mode)
{
    struct peer p;
    g_nobody_mode = mode;
    start(&p, NOBODY_UID, NOBODY_GID, nobody_creates);
    int id = get(p.from_child);
    finish(&p);
    return id;
}

/* Its owner removes nobody's set: root may lack CAP_SYS_ADMIN. */
static void nobody_removes(struct peer *p)
{
    expect_ok("06 IPC_RMID of nobody's set by nobody", semctl(get(p->in), 0, IPC_RMID));
}

static void remove_nobodys_set(int id)
{
    struct peer p;
    start(&p, NOBODY_UID, NOBODY_GID, nobody_removes);
    put(p.to_child, id);
    finish(&p);
}

static void root_without_capabilities(struct peer *p)
{
    struct __user_cap_data_struct data[2];
    if (caps_get(data) == -1)
        die("capget");
    data[0].effective &= ~(CAP_BIT(CAP_IPC_OWNER) | CAP_BIT(CAP_SYS_ADMIN));
    if (caps_set(data) == -1)
        die("capset");
    int own = get(p->in);
    int nobodys = get(p->in);
    printf("06 user id 0: %d\n", geteuid() == 0);
    printf("06 CAP_IPC_OWNER or CAP_SYS_ADMIN left: %d\n",
           has_cap(CAP_IPC_OWNER) || has_cap(CAP_SYS_ADMIN));
    struct semid_ds ds;
    union semun arg = { .buf = &ds };
    expect_ok("06 semop +1 on its own mode-0 set", op(own, 0, 1, IPC_NOWAIT));
    show("06 GETVAL of its own mode-0 set", semctl(own, 0, GETVAL));
    expect_ok("06 IPC_STAT of its own mode-0 set", semctl(own, 0, IPC_STAT, arg));
    int index = stat_any_index(own);
    printf("06 SEM_STAT_ANY finds its own mode-0 set: %d\n", index != -1);
    if (index != -1)
        expect_ok("06 SEM_STAT of its own mode-0 set", semctl(index, 0, SEM_STAT, arg));
    expect_ok("06 semop +1 on nobody's 0666 set", op(nobodys, 0, 1, IPC_NOWAIT));
    expect_ok("06 IPC_SET of nobody's 0666 set", set_perm(nobodys, 0, 0, 0666));
    expect_ok("06 IPC_RMID of nobody's 0666 set", semctl(nobodys, 0, IPC_RMID));
    expect_ok("06 IPC_SET mode 0600 of its own set, by ownership", set_perm(own, 0, 0, 0600));
    show("06 GETVAL of its own set at 0600", semctl(own, 0, GETVAL));
    put(p->out, 1);
}

static void perm06(void)
{
    struct peer p;
    start(&p, 0, 0, root_without_capabilities);
    int nobodys = nobodys_set(0666);
    int own = new_set(1, 0);
    put(p.to_child, own);
    put(p.to_child, nobodys);
    get(p.from_child);
    finish(&p);
    remove_nobodys_set(nobodys);
    remove_set(own);
}

/* nobody with CAP_IPC_OWNER alone: its own mode-0 set, whose file it owns,
 * and semget of root's, whose file (mode 0600) it may not open: its reads
 * and writes, which the kernel allows, the shared sets refuse. */
static void nobody_with_ipc_owner(struct peer *p)
{
    int own = get(p->in);
    int roots = get(p->in);
    printf("07 CAP_IPC_OWNER kept: %d\n", has_cap(CAP_IPC_OWNER));
    struct semid_ds ds;
    union semun arg = { .buf = &ds };
    show("07 GETVAL of its own mode-0 set", semctl(own, 0, GETVAL));
    expect_ok("07 semop +1 on its own mode-0 set", op(own, 0, 1, IPC_NOWAIT));
    show("07 GETVAL of its own mode-0 set after", semctl(own, 0, GETVAL));
    expect_ok("07 IPC_STAT of its own mode-0 set", semctl(own, 0, IPC_STAT, arg));
    expect_ok("07 IPC_RMID of its own set", semctl(own, 0, IPC_RMID));
    printf("07 semget asking read and alter finds root's mode-0 set: %d\n",
           semget(g_caps_key, 0, 0600) == roots);
    expect_ok("07 IPC_RMID of root's set", semctl(roots, 0, IPC_RMID));
    put(p->out, 1);
}

/* nobody with CAP_IPC_OWNER and CAP_DAC_OVERRIDE, which opens any file. */
static void nobody_with_ipc_owner_and_dac_override(struct peer *p)
{
    int roots = get(p->in);
    printf("07 CAP_IPC_OWNER and CAP_DAC_OVERRIDE kept: %d\n",
           has_cap(CAP_IPC_OWNER) && has_cap(CAP_DAC_OVERRIDE));
    show("07 with CAP_DAC_OVERRIDE GETVAL of root's mode-0 set", semctl(roots, 0, GETVAL));
    expect_ok("07 with CAP_DAC_OVERRIDE semop +1 on root's mode-0 set", op(roots, 0, 1, IPC_NOWAIT));
    show("07 with CAP_DAC_OVERRIDE GETVAL after", semctl(roots, 0, GETVAL));
    put(p->out, 1);
}

static void perm07(void)
{
    if (!may_keep(CAP_BIT(CAP_IPC_OWNER) | CAP_BIT(CAP_DAC_OVERRIDE))) {
        printf("07 skipped: no CAP_IPC_OWNER and CAP_DAC_OVERRIDE to keep\n");
        return;
    }
    struct peer alone, with_dac;
    int own = nobodys_set(0);
    start_keeping(&alone, NOBODY_UID, NOBODY_GID, CAP_BIT(CAP_IPC_OWNER), nobody_with_ipc_owner);
    start_keeping(&with_dac, NOBODY_UID, NOBODY_GID,
                  CAP_BIT(CAP_IPC_OWNER) | CAP_BIT(CAP_DAC_OVERRIDE),
                  nobody_with_ipc_owner_and_dac_override);
    int roots = semget(g_caps_key, 1, IPC_CREAT | IPC_EXCL | 0);
    if (roots == -1)
        die("semget(key)");
    put(alone.to_child, own);
    put(alone.to_child, roots);
    get(alone.from_child);
    finish(&alone);
    put(with_dac.to_child, roots);
    get(with_dac.from_child);
    finish(&with_dac);
    remove_set(roots);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (!is_root()) {
        printf("skipped: not root, so no child can become another user\n");
        return 0;
    }
    g_key = private_key(1);
    g_owners_key = private_key(2);
    g_given_key = private_key(3);
    g_caps_key = private_key(4);
    g_open_key = private_key(5);
    perm01();
    perm02();
    perm03();
    perm04();
    perm05();
    perm06();
    perm07();
    return 0;
}
