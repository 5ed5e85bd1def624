/* semop(2) and semtimedop(2): the cases of LTP's semop01 and semop02,
 * written for this project.
 *  01  four SEM_UNDO increments of i*i in one call, by semop and by
 *      semtimedop: GETALL shows them, sempid and otime are set
 *  02  the error table: E2BIG, EACCES, EFAULT (sops, timeout), EINVAL
 *      (nsops 0, semid -1, bad timespec), ERANGE, EFBIG, EAGAIN (IPC_NOWAIT
 *      and timeouts), plus the kernel's all-or-nothing and array-order rules
 *  03  (not in LTP) the operations and the timeout wherever a program keeps
 *      them: on the stack, in static data, on the main heap, in a thread's
 *      malloc arena, in an mmap'd page, and in a page unmapped or made
 *      unreadable since (EFAULT); a preloading library reads each its own
 *      way (see the library's user.rs), and every way must answer alike */
#include "common.h"
#include <pthread.h>
#include <sys/mman.h>

static int g_id;

static void nobody_semop(void *unused)
{
    (void)unused;
    struct sembuf op = { 0, 1, 0 };
    expect_ok("02 semop as nobody on a mode-0 set", semop(g_id, &op, 1));
    expect_ok("02 semtimedop as nobody on a mode-0 set", semtimedop(g_id, &op, 1, NULL));
}

static void show_all(const char *what, int id, int n)
{
    unsigned short v[PSEMS];
    union semun arg = { .array = v };
    if (semctl(id, 0, GETALL, arg) == -1)
        die("GETALL");
    printf("%s:", what);
    for (int i = 0; i < n; i++)
        printf(" %u", v[i]);
    printf("\n");
}

static void semop01(int timed)
{
    const char *how = timed ? "semtimedop" : "semop";
    int id = new_set(PSEMS, 0600);
    struct sembuf ops[4];
    for (int i = 0; i < 4; i++) {
        ops[i].sem_num = i;
        ops[i].sem_op = i * i;
        ops[i].sem_flg = SEM_UNDO;
    }
    struct timespec ts = { 0, 10000 };
    char what[64];
    snprintf(what, sizeof what, "01 %s four increments", how);
    expect_ok(what, timed ? semtimedop(id, ops, 4, &ts) : semop(id, ops, 4));
    snprintf(what, sizeof what, "01 %s values", how);
    show_all(what, id, PSEMS);
    snprintf(what, sizeof what, "01 %s GETPID is caller", how);
    printf("%s: %d\n", what, semctl(id, 3, GETPID) == getpid());
    struct semid_ds ds;
    union semun arg = { .buf = &ds };
    semctl(id, 0, IPC_STAT, arg);
    snprintf(what, sizeof what, "01 %s sem_otime set", how);
    printf("%s: %d\n", what, ds.sem_otime != 0);
    remove_set(id);
}

static void semop02(void)
{
    int id = new_set(PSEMS, 0600);
    struct sembuf op = { 0, 1, 0 };
    static struct sembuf many[1024];
    struct timespec ts = { 0, 10000 };

    expect_ok("02 semop nsops 1024", semop(id, many, 1024));
    expect_ok("02 semop nsops 501", semop(id, many, 501));
    expect_ok("02 semop nsops 1024 bad sops", semop(id, BAD_ADDR, 1024));
    expect_ok("02 semop bad sops", semop(id, BAD_ADDR, 1));
    expect_ok("02 semtimedop bad sops", semtimedop(id, BAD_ADDR, 1, &ts));
    expect_ok("02 semtimedop bad timeout", semtimedop(id, &op, 1, BAD_ADDR));
    expect_ok("02 semop nsops 0", semop(id, &op, 0));
    expect_ok("02 semop semid -1", semop(-1, &op, 1));
    expect_ok("02 semop semid -1 nsops 0", semop(-1, &op, 0));
    expect_ok("02 semop semid -1 nsops 1024", semop(-1, many, 1024));
    expect_ok("02 semtimedop semid -1 bad timeout", semtimedop(-1, &op, 1, BAD_ADDR));

    struct timespec bad = { 0, 1000000000L };
    struct sembuf wait1 = { 0, -1, 0 };
    expect_ok("02 semtimedop tv_nsec 1e9", semtimedop(id, &wait1, 1, &bad));
    bad.tv_sec = -1;
    bad.tv_nsec = 0;
    expect_ok("02 semtimedop tv_sec -1", semtimedop(id, &wait1, 1, &bad));

    /* ERANGE: semval 1 plus semvmx. */
    struct seminfo info;
    union semun iarg = { .__buf = &info };
    if (semctl(id, 0, IPC_INFO, iarg) == -1)
        die("IPC_INFO");
    printf("02 semvmx: %d\n", info.semvmx);
    union semun one = { .val = 1 };
    semctl(id, 0, SETVAL, one);
    struct sembuf big = { 0, (short)info.semvmx, 0 };
    expect_ok("02 semop past semvmx", semop(id, &big, 1));
    show("02 value after ERANGE", semctl(id, 0, GETVAL));

    /* ERANGE from the undo adjustment: semadj leaves the short range. */
    union semun zero = { .val = 0 };
    semctl(id, 1, SETVAL, zero);
    struct sembuf up_undo = { 1, 32767, SEM_UNDO }, down_plain = { 1, -32767, 0 };
    struct sembuf up1_undo = { 1, 1, SEM_UNDO }, down1_plain = { 1, -1, 0 };
    expect_ok("02 SEM_UNDO +32767 (semadj -32767)", semop(id, &up_undo, 1));
    expect_ok("02 plain -32767", semop(id, &down_plain, 1));
    expect_ok("02 SEM_UNDO +1 (semadj -32768)", semop(id, &up1_undo, 1));
    expect_ok("02 plain -1", semop(id, &down1_plain, 1));
    expect_ok("02 SEM_UNDO +1 (semadj -32769)", semop(id, &up1_undo, 1));
    show("02 value after undo ERANGE", semctl(id, 1, GETVAL));
    /* SETVAL clears the semadj: the same op now succeeds. */
    semctl(id, 1, SETVAL, zero);
    expect_ok("02 SEM_UNDO +1 after SETVAL", semop(id, &up1_undo, 1));

    /* EFBIG: sem_num -1 is 65535; PSEMS+1. */
    struct sembuf neg = { (unsigned short)-1, 1, 0 };
    expect_ok("02 semop sem_num -1", semop(id, &neg, 1));
    struct sembuf past = { PSEMS + 1, 1, 0 };
    expect_ok("02 semop sem_num PSEMS+1", semop(id, &past, 1));
    struct sembuf at = { PSEMS, 1, 0 };
    expect_ok("02 semop sem_num PSEMS", semop(id, &at, 1));

    /* EAGAIN. */
    struct sembuf zwait = { 0, 0, IPC_NOWAIT };
    expect_ok("02 wait-for-zero on 1, IPC_NOWAIT", semop(id, &zwait, 1));
    semctl(id, 2, SETVAL, zero);
    struct sembuf dnw = { 2, -1, IPC_NOWAIT };
    expect_ok("02 -1 on 0, IPC_NOWAIT", semop(id, &dnw, 1));
    struct sembuf zt = { 0, 0, 0 };
    expect_ok("02 semtimedop wait-for-zero times out", semtimedop(id, &zt, 1, &ts));
    struct sembuf dt = { 2, -1, 0 };
    expect_ok("02 semtimedop -1 times out", semtimedop(id, &dt, 1, &ts));
    struct timespec none = { 0, 0 };
    expect_ok("02 semtimedop timeout 0 blocks", semtimedop(id, &dt, 1, &none));

    /* All or nothing: a later op blocks, the earlier one is not applied. */
    struct sembuf pair[2] = { { 3, 5, 0 }, { 2, -1, IPC_NOWAIT } };
    expect_ok("02 +5 then blocking -1", semop(id, pair, 2));
    show("02 value untouched", semctl(id, 3, GETVAL));
    /* The first failing op decides: it blocks before a later ERANGE counts. */
    struct sembuf order[2] = { { 2, -1, IPC_NOWAIT }, { 0, 32767, 0 } };
    expect_ok("02 blocking op before ERANGE op", semop(id, order, 2));
    /* Array order on one semaphore: +1 then -2 on value 1 succeeds. */
    semctl(id, 4, SETVAL, one);
    struct sembuf dup[2] = { { 4, 1, 0 }, { 4, -2, 0 } };
    expect_ok("02 {+1,-2} on 1", semop(id, dup, 2));
    show("02 value after {+1,-2}", semctl(id, 4, GETVAL));
    struct sembuf dupz[2] = { { 4, 1, 0 }, { 4, 0, IPC_NOWAIT } };
    expect_ok("02 {+1,0} on 0", semop(id, dupz, 2));
    struct sembuf zfirst[2] = { { 4, 0, 0 }, { 4, 1, 0 } };
    expect_ok("02 {0,+1} on 0", semop(id, zfirst, 2));
    show("02 value after {0,+1}", semctl(id, 4, GETVAL));

    /* Permissions. */
    g_id = new_set(1, 0);
    if (is_root())
        as_nobody(nobody_semop, NULL);
    else
        printf("02 EACCES cases skipped: not root\n");
    remove_set(g_id);

    remove_set(id);
    expect_ok("02 semop on a removed set", semop(id, &op, 1));
}

static struct sembuf static_ops[2] = { { 0, 1, 0 }, { 0, -1, 0 } };
static struct timespec static_timeout = { 0, 1000000 };

/* A +1 and a -1 in one call through `ops`, then a timed wait-for-zero
 * through `ops` and `ts` (the value is 0 again, so it returns at once). */
static void ops_at(const char *where, int id, struct sembuf *ops, struct timespec *ts)
{
    char what[96];
    snprintf(what, sizeof what, "03 semop with ops %s", where);
    show(what, semop(id, ops, 2));
    snprintf(what, sizeof what, "03 semtimedop with ops and timeout %s", where);
    ops[0] = (struct sembuf){ 0, 0, 0 };
    show(what, semtimedop(id, ops, 1, ts));
}

struct arena_args {
    int id;
};

static void *in_thread_arena(void *arg)
{
    int id = ((struct arena_args *)arg)->id;
    /* A thread's small allocations come from its own arena, not the brk heap. */
    struct sembuf *ops = malloc(2 * sizeof *ops);
    struct timespec *ts = malloc(sizeof *ts);
    if (ops == NULL || ts == NULL)
        die("malloc");
    ops[0] = (struct sembuf){ 0, 1, 0 };
    ops[1] = (struct sembuf){ 0, -1, 0 };
    *ts = (struct timespec){ 0, 1000000 };
    ops_at("in a thread's malloc arena", id, ops, ts);
    free(ops);
    free(ts);
    return NULL;
}

static void semop03(void)
{
    int id = new_set(1, 0600);
    struct sembuf local[2] = { { 0, 1, 0 }, { 0, -1, 0 } };
    struct timespec local_ts = { 0, 1000000 };
    ops_at("on the stack", id, local, &local_ts);
    ops_at("in static data", id, static_ops, &static_timeout);

    struct sembuf *heap = malloc(2 * sizeof *heap);
    struct timespec *heap_ts = malloc(sizeof *heap_ts);
    if (heap == NULL || heap_ts == NULL)
        die("malloc");
    heap[0] = (struct sembuf){ 0, 1, 0 };
    heap[1] = (struct sembuf){ 0, -1, 0 };
    *heap_ts = (struct timespec){ 0, 1000000 };
    ops_at("on the main heap", id, heap, heap_ts);
    free(heap);
    free(heap_ts);

    struct arena_args args = { id };
    pthread_t t;
    if (pthread_create(&t, NULL, in_thread_arena, &args) != 0)
        die("pthread_create");
    pthread_join(t, NULL);

    long page = sysconf(_SC_PAGESIZE);
    char *map = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        die("mmap");
    struct sembuf *mapped = (struct sembuf *)map;
    struct timespec *mapped_ts = (struct timespec *)(map + 64);
    mapped[0] = (struct sembuf){ 0, 1, 0 };
    mapped[1] = (struct sembuf){ 0, -1, 0 };
    *mapped_ts = (struct timespec){ 0, 1000000 };
    ops_at("in an mmap'd page", id, mapped, mapped_ts);
    /* The same addresses once the page is unreadable, then once it is gone. */
    if (mprotect(map, (size_t)page, PROT_NONE) == -1)
        die("mprotect");
    show("03 semop with ops in a PROT_NONE page", semop(id, mapped, 2));
    show("03 semtimedop with a timeout in a PROT_NONE page", semtimedop(id, local, 1, mapped_ts));
    munmap(map, (size_t)page);
    show("03 semop with ops in an unmapped page", semop(id, mapped, 2));
    show("03 semtimedop with a timeout in an unmapped page", semtimedop(id, local, 1, mapped_ts));
    show("03 value at the end", semctl(id, 0, GETVAL));
    remove_set(id);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    semop01(0);
    semop01(1);
    semop02();
    semop03();
    return 0;
}
