/* Sleeping in semop(2): the cases of LTP's semop03, semop04 and semop05,
 * written for this project.
 *  03  a child sleeping (wait-for-zero on 1, or -1 on 0) gets EIDRM when the
 *      set is removed and EINTR when a signal arrives (no SA_RESTART either way)
 *  04  two processes, 1000 times each: P(SEM_UNDO), a short critical section,
 *      V(SEM_UNDO) on a binary semaphore: never two inside, no deadlock
 *  05  undo belongs to the process, not the thread: a thread's SEM_UNDO +1 is
 *      not undone when that thread exits */
#include "common.h"
#include <pthread.h>
#include <sys/mman.h>

static void on_signal(int sig)
{
    (void)sig;
}

/* Forks a child that blocks in `op` on `id` and reports what semop returned
 * through its exit status. */
static pid_t blocked_child(int id, struct sembuf op)
{
    fflush(stdout);
    pid_t pid = fork();
    if (pid == -1)
        die("fork");
    if (pid == 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGHUP, &sa, NULL);
        struct timespec limit = { 20, 0 };
        int rc = semtimedop(id, &op, 1, &limit);
        _exit(rc == 0 ? 0 : (errno & 0x7f));
    }
    return pid;
}

static void report_child(const char *what, pid_t pid)
{
    int status;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status))
        printf("%s: child died\n", what);
    else if (WEXITSTATUS(status) == 0)
        printf("%s: ok\n", what);
    else
        printf("%s: -1 %s\n", what, errno_name(WEXITSTATUS(status)));
}

static void semop03(void)
{
    for (int zero_wait = 0; zero_wait <= 1; zero_wait++) {
        for (int by_signal = 0; by_signal <= 1; by_signal++) {
            int id = new_set(PSEMS, 0600);
            union semun one = { .val = 1 };
            if (zero_wait)
                semctl(id, 0, SETVAL, one);
            struct sembuf op = { 0, zero_wait ? 0 : -1, 0 };
            pid_t pid = blocked_child(id, op);
            wait_sleepers(id, 0, zero_wait ? GETZCNT : GETNCNT, 1);
            char what[80];
            snprintf(what, sizeof what, "03 child sleeping in %s, then %s",
                     zero_wait ? "wait-for-zero" : "-1", by_signal ? "SIGHUP" : "IPC_RMID");
            if (by_signal) {
                kill(pid, SIGHUP);
                report_child(what, pid);
                show("03 sleepers after the signal", semctl(id, 0, zero_wait ? GETZCNT : GETNCNT));
                remove_set(id);
            } else {
                remove_set(id);
                report_child(what, pid);
            }
        }
    }
}

struct shared_state {
    volatile int inside;
    volatile int overlaps;
};

static void semop04(void)
{
    struct shared_state *st = mmap(NULL, sizeof *st, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (st == MAP_FAILED)
        die("mmap");
    int id = new_set(1, 0600);
    union semun one = { .val = 1 };
    semctl(id, 0, SETVAL, one);
    fflush(stdout);
    pid_t kids[2];
    for (int k = 0; k < 2; k++) {
        kids[k] = fork();
        if (kids[k] == -1)
            die("fork");
        if (kids[k] == 0) {
            srand(k + 1);
            struct sembuf p = { 0, -1, SEM_UNDO }, v = { 0, 1, SEM_UNDO };
            for (int i = 0; i < 1000; i++) {
                if (semop(id, &p, 1) == -1)
                    _exit(1);
                if (__atomic_add_fetch(&st->inside, 1, __ATOMIC_SEQ_CST) != 1)
                    __atomic_add_fetch(&st->overlaps, 1, __ATOMIC_SEQ_CST);
                if (rand() % 8 == 0)
                    usleep(rand() % 100);
                __atomic_sub_fetch(&st->inside, 1, __ATOMIC_SEQ_CST);
                if (semop(id, &v, 1) == -1)
                    _exit(1);
            }
            _exit(0);
        }
    }
    int failed = 0;
    for (int k = 0; k < 2; k++) {
        int status;
        waitpid(kids[k], &status, 0);
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    printf("04 both processes finished 1000 P/V: %d\n", !failed);
    printf("04 overlaps in the critical section: %d\n", st->overlaps);
    show("04 value at the end", semctl(id, 0, GETVAL));
    remove_set(id);
    munmap(st, sizeof *st);
}

static int g_thread_set;

static void *poster(void *unused)
{
    (void)unused;
    struct sembuf v = { 0, 1, SEM_UNDO };
    expect_ok("05 thread V with SEM_UNDO", semop(g_thread_set, &v, 1));
    return NULL;
}

static void semop05(void)
{
    g_thread_set = new_set(1, 0600);
    pthread_t t;
    if (pthread_create(&t, NULL, poster, NULL) != 0)
        die("pthread_create");
    pthread_join(t, NULL);
    show("05 value after the thread exited", semctl(g_thread_set, 0, GETVAL));
    struct sembuf p = { 0, -1, SEM_UNDO | IPC_NOWAIT };
    expect_ok("05 main thread P with SEM_UNDO", semop(g_thread_set, &p, 1));
    remove_set(g_thread_set);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    semop03();
    semop04();
    semop05();
    return 0;
}
