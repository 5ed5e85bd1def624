/* Processes made without fork's handlers: glibc's _Fork (2.34), which
 * runs no pthread_atfork handler, as a program forking from a signal
 * handler would. Each child is a process of its own to the kernel:
 *  - its SEM_UNDO adjustment is its own and is given back when it exits,
 *    and its exit leaves its parent's adjustment alone
 *  - GETPID names it after its call
 *  - it can wake several sleepers with one call, after its parent woke
 *    several with one call */
#include "common.h"

#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
#define HAVE_FORK_WITHOUT_HANDLERS 1
#endif

#ifdef HAVE_FORK_WITHOUT_HANDLERS
static pid_t fork_without_handlers(void)
{
    fflush(stdout);
    pid_t pid = _Fork();
    if (pid == -1)
        die("_Fork");
    return pid;
}

static int exited_cleanly(pid_t pid)
{
    int status;
    if (waitpid(pid, &status, 0) != pid)
        die("waitpid");
    return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void undo_is_the_childs(void)
{
    int id = new_set(2, 0600);
    union semun one = { .val = 1 };
    semctl(id, 0, SETVAL, one);
    semctl(id, 1, SETVAL, one);
    /* The parent holds semaphore 0 through SEM_UNDO: it now has a place in
     * the set and knows its pid. */
    struct sembuf take0 = { 0, -1, SEM_UNDO };
    show("parent takes semaphore 0", semop(id, &take0, 1));
    pid_t child = fork_without_handlers();
    if (child == 0) {
        struct sembuf take1 = { 1, -1, SEM_UNDO };
        int ok = semop(id, &take1, 1) == 0 && semctl(id, 1, GETPID) == getpid();
        _exit(ok ? 0 : 1);
    }
    printf("child took semaphore 1 and GETPID named it: %d\n", exited_cleanly(child));
    show("semaphore 1 after the child's exit", semctl(id, 1, GETVAL));
    printf("GETPID of semaphore 1 is the child: %d\n", semctl(id, 1, GETPID) == child);
    show("semaphore 0 still held by the parent", semctl(id, 0, GETVAL));
    printf("GETPID of semaphore 0 is the parent: %d\n", semctl(id, 0, GETPID) == getpid());
    remove_set(id);
}

/* Forks `n` children (with fork) that each wait for semaphore 0. */
static void start_sleepers(int id, pid_t *pids, int n)
{
    for (int i = 0; i < n; i++) {
        fflush(stdout);
        pids[i] = fork();
        if (pids[i] == -1)
            die("fork");
        if (pids[i] == 0) {
            struct sembuf down = { 0, -1, 0 };
            struct timespec limit = { 20, 0 };
            _exit(semtimedop(id, &down, 1, &limit) == 0 ? 0 : 1);
        }
    }
    wait_sleepers(id, 0, GETNCNT, n);
}

static int all_woke(pid_t *pids, int n)
{
    int ok = 1;
    for (int i = 0; i < n; i++)
        ok &= exited_cleanly(pids[i]);
    return ok;
}

static void a_child_wakes_many(void)
{
    enum { N = 4 };
    int id = new_set(1, 0600);
    pid_t pids[N];
    struct sembuf post = { 0, N, 0 };
    start_sleepers(id, pids, N);
    show("parent wakes four with one call", semop(id, &post, 1));
    printf("the four woke: %d\n", all_woke(pids, N));
    start_sleepers(id, pids, N);
    pid_t child = fork_without_handlers();
    if (child == 0)
        _exit(semop(id, &post, 1) == 0 ? 0 : 1);
    printf("a child wakes four with one call: %d\n", exited_cleanly(child));
    printf("the four woke: %d\n", all_woke(pids, N));
    show("value after", semctl(id, 0, GETVAL));
    remove_set(id);
}
#endif

int main(void)
{
#ifdef HAVE_FORK_WITHOUT_HANDLERS
    undo_is_the_childs();
    a_child_wakes_many();
#else
    printf("no _Fork in this C library: nothing to check\n");
#endif
    return 0;
}
