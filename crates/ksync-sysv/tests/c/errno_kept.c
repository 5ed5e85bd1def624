/* errno after a successful call: the kernel's wrappers set errno only when a
 * call fails, so a program may set errno to 0, make a call whose result
 * cannot tell failure apart (semctl GETVAL on a value it does not know, say)
 * and look at errno afterwards. Every call below succeeds; each line says
 * whether errno still holds what the program stored before the call. The
 * calls are chosen to take the paths where an implementation makes system
 * calls of its own that may fail on the way to success: creating a set,
 * finding one by key, sleeping and being woken, timing a sleep, undo. */
#include "common.h"

/* A value none of these calls would set: any change shows. */
#define SENTINEL ENOTTY

static void check(const char *what, long rc)
{
    int after = errno;
    if (rc == -1)
        printf("%s: -1 %s\n", what, errno_name(after));
    else if (after == SENTINEL)
        printf("%s: errno kept\n", what);
    else
        printf("%s: errno changed to %s (%d)\n", what, errno_name(after), after);
}

#define CALL(what, expr)                                                                          \
    do {                                                                                          \
        errno = SENTINEL;                                                                         \
        long rc_ = (long)(expr);                                                                  \
        check(what, rc_);                                                                         \
    } while (0)

/* Forks a child that, after `delay_ms`, makes `op` on `id` (a post that
 * wakes the parent), and exits. */
static pid_t poster(int id, struct sembuf op, long delay_ms)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == -1)
        die("fork");
    if (pid == 0) {
        sleep_ms(delay_ms);
        _exit(semop(id, &op, 1) == 0 ? 0 : 1);
    }
    return pid;
}

static void reap(pid_t pid)
{
    int status;
    if (waitpid(pid, &status, 0) == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        printf("poster child died or failed\n");
}

int main(void)
{
    union semun arg;
    key_t key = private_key(1);
    int id;

    errno = SENTINEL;
    id = semget(key, 3, IPC_CREAT | IPC_EXCL | 0600);
    check("01 semget IPC_CREAT|IPC_EXCL new key", id);
    if (id == -1)
        die("semget");
    CALL("02 semget existing key", semget(key, 3, 0600));
    CALL("03 semget existing key, nsems 0, flags 0", semget(key, 0, 0));
    CALL("04 semget IPC_CREAT existing key", semget(key, 3, IPC_CREAT | 0600));
    int priv;
    errno = SENTINEL;
    priv = semget(IPC_PRIVATE, 2, IPC_CREAT | 0600);
    check("05 semget IPC_PRIVATE", priv);

    struct sembuf up = { 0, 1, 0 };
    struct sembuf down = { 0, -1, 0 };
    struct sembuf up_undo = { 1, 1, SEM_UNDO };
    struct sembuf down_undo = { 1, -1, SEM_UNDO };
    struct sembuf zero = { 2, 0, 0 };
    CALL("06 semop +1", semop(id, &up, 1));
    CALL("07 semop -1 without waiting", semop(id, &down, 1));
    CALL("08 semop +1 SEM_UNDO", semop(id, &up_undo, 1));
    CALL("09 semop -1 SEM_UNDO", semop(id, &down_undo, 1));
    struct timespec limit = { 5, 0 };
    CALL("10 semtimedop +1", semtimedop(id, &up, 1, &limit));
    CALL("11 semtimedop -1 without waiting", semtimedop(id, &down, 1, &limit));

    /* Sleeps: the parent waits, a child's post wakes it. */
    pid_t pid = poster(id, up, 50);
    CALL("12 semop -1 woken by another process", semop(id, &down, 1));
    reap(pid);
    pid = poster(id, up, 50);
    CALL("13 semtimedop -1 woken by another process", semtimedop(id, &down, 1, &limit));
    reap(pid);
    arg.val = 1;
    semctl(id, 2, SETVAL, arg);
    struct sembuf to_zero = { 2, -1, 0 };
    pid = poster(id, to_zero, 50);
    CALL("14 semop wait-for-zero woken by another process", semop(id, &zero, 1));
    reap(pid);
    pid = poster(id, up_undo, 50);
    CALL("15 semop -1 SEM_UNDO woken by another process", semop(id, &down_undo, 1));
    reap(pid);

    arg.val = 7;
    CALL("16 semctl SETVAL", semctl(id, 0, SETVAL, arg));
    CALL("17 semctl GETVAL", semctl(id, 0, GETVAL));
    unsigned short values[3] = { 1, 2, 3 };
    arg.array = values;
    CALL("18 semctl SETALL", semctl(id, 0, SETALL, arg));
    CALL("19 semctl GETALL", semctl(id, 0, GETALL, arg));
    CALL("20 semctl GETNCNT", semctl(id, 0, GETNCNT));
    CALL("21 semctl GETZCNT", semctl(id, 0, GETZCNT));
    CALL("22 semctl GETPID", semctl(id, 0, GETPID));
    struct semid_ds ds;
    arg.buf = &ds;
    CALL("23 semctl IPC_STAT", semctl(id, 0, IPC_STAT, arg));
    CALL("24 semctl IPC_SET", semctl(id, 0, IPC_SET, arg));
    struct seminfo info;
    arg.__buf = &info;
    CALL("25 semctl IPC_INFO", semctl(id, 0, IPC_INFO, arg));
    CALL("26 semctl SEM_INFO", semctl(id, 0, SEM_INFO, arg));
    CALL("27 semctl IPC_RMID", semctl(id, 0, IPC_RMID));
    if (priv != -1)
        CALL("28 semctl IPC_RMID (IPC_PRIVATE)", semctl(priv, 0, IPC_RMID));
    return 0;
}
