/* SEM_UNDO across processes, fork, exec and SIGKILL (not in LTP).
 *  - a process holding a semaphore through SEM_UNDO is killed with SIGKILL:
 *    its hold is given back, GETPID names it, and a sleeper waiting for that
 *    semaphore wakes up and gets it
 *  - a sleeper killed while it waits leaves no trace (GETNCNT 0, value kept)
 *  - the adjustment on exit is clamped to [0, 32767] instead of blocking,
 *    and is an operation: sem_otime moves
 *  - fork does not copy undo (a child's exit undoes nothing of its parent's),
 *    exec keeps it (the undo happens when the exec'd program exits)
 *  - IPC_RMID while a process holds undo: that process exits cleanly */
#include "common.h"

static int pipe_fds[2];

/* Forks a child that runs `ops` with SEM_UNDO, tells the parent, then sleeps
 * until killed. */
static pid_t holder(int id, struct sembuf *ops, int nops)
{
    fflush(stdout);
    if (pipe(pipe_fds) == -1)
        die("pipe");
    pid_t pid = fork();
    if (pid == -1)
        die("fork");
    if (pid == 0) {
        close(pipe_fds[0]);
        char ok = semop(id, ops, nops) == 0 ? 'y' : 'n';
        if (write(pipe_fds[1], &ok, 1) != 1)
            _exit(1);
        for (;;)
            pause();
    }
    close(pipe_fds[1]);
    char ok = 'n';
    if (read(pipe_fds[0], &ok, 1) != 1)
        ok = 'n';
    close(pipe_fds[0]);
    printf("holder's semop: %s\n", ok == 'y' ? "ok" : "failed");
    return pid;
}

static void kill_and_reap(pid_t pid)
{
    kill(pid, SIGKILL);
    int status;
    waitpid(pid, &status, 0);
    printf("killed by SIGKILL: %d\n", WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

static void killed_holder(void)
{
    int id = new_set(2, 0600);
    union semun one = { .val = 1 };
    semctl(id, 0, SETVAL, one);
    struct sembuf take = { 0, -1, SEM_UNDO };
    pid_t h = holder(id, &take, 1);
    show("value while held", semctl(id, 0, GETVAL));

    /* A second process waits for the semaphore. */
    fflush(stdout);
    pid_t waiter = fork();
    if (waiter == -1)
        die("fork");
    if (waiter == 0) {
        struct sembuf p = { 0, -1, 0 };
        struct timespec limit = { 20, 0 };
        _exit(semtimedop(id, &p, 1, &limit) == 0 ? 0 : 1);
    }
    wait_sleepers(id, 0, GETNCNT, 1);
    show("GETNCNT with the waiter asleep", semctl(id, 0, GETNCNT));
    kill_and_reap(h);
    int status;
    waitpid(waiter, &status, 0);
    printf("waiter got the semaphore after the kill: %d\n", WIFEXITED(status) && WEXITSTATUS(status) == 0);
    show("value after the waiter took it", semctl(id, 0, GETVAL));
    printf("GETPID is the waiter: %d\n", semctl(id, 0, GETPID) == waiter);

    /* Kill a holder with nobody waiting: GETPID names the killed process. */
    semctl(id, 1, SETVAL, one);
    struct sembuf take1 = { 1, -1, SEM_UNDO };
    h = holder(id, &take1, 1);
    kill_and_reap(h);
    show("value after the holder was killed", semctl(id, 1, GETVAL));
    printf("GETPID is the killed holder: %d\n", semctl(id, 1, GETPID) == h);

    /* A sleeper killed while waiting leaves nothing behind. */
    union semun zero = { .val = 0 };
    semctl(id, 1, SETVAL, zero);
    fflush(stdout);
    pid_t sleeper = fork();
    if (sleeper == -1)
        die("fork");
    if (sleeper == 0) {
        struct sembuf p = { 1, -1, SEM_UNDO };
        semop(id, &p, 1);
        _exit(0);
    }
    wait_sleepers(id, 1, GETNCNT, 1);
    kill_and_reap(sleeper);
    show("GETNCNT after the sleeper was killed", semctl(id, 1, GETNCNT));
    show("value after the sleeper was killed", semctl(id, 1, GETVAL));
    remove_set(id);
}

static void clamping(void)
{
    int id = new_set(2, 0600);
    /* The holder's +1 would be undone as -1, but the value is 0 by then. */
    struct sembuf up = { 0, 1, SEM_UNDO };
    pid_t h = holder(id, &up, 1);
    struct sembuf down = { 0, -1, 0 };
    semop(id, &down, 1);
    kill_and_reap(h);
    show("undo of +1 on value 0 clamps to", semctl(id, 0, GETVAL));

    /* The holder's -1 would be undone as +1 on 32767. */
    union semun one = { .val = 1 };
    semctl(id, 1, SETVAL, one);
    struct sembuf take = { 1, -1, SEM_UNDO };
    h = holder(id, &take, 1);
    struct sembuf fill = { 1, 32767, 0 };
    semop(id, &fill, 1);
    kill_and_reap(h);
    show("undo of -1 on value 32767 clamps to", semctl(id, 1, GETVAL));

    /* SETVAL clears the holder's adjustment: nothing is undone. */
    semctl(id, 1, SETVAL, one);
    h = holder(id, &take, 1);
    union semun five = { .val = 5 };
    semctl(id, 1, SETVAL, five);
    kill_and_reap(h);
    show("undo after SETVAL leaves", semctl(id, 1, GETVAL));
    remove_set(id);
}

static void undo_stamps_otime(void)
{
    int id = new_set(1, 0600);
    struct sembuf up = { 0, 1, SEM_UNDO };
    pid_t h = holder(id, &up, 1);
    struct semid_ds ds;
    union semun arg = { .buf = &ds };
    if (semctl(id, 0, IPC_STAT, arg) == -1)
        die("IPC_STAT");
    time_t before = ds.sem_otime;
    /* sem_otime counts whole seconds: let the next one begin. */
    while (time(NULL) <= before)
        sleep_ms(10);
    kill_and_reap(h);
    show("value after the holder's undo", semctl(id, 0, GETVAL));
    if (semctl(id, 0, IPC_STAT, arg) == -1)
        die("IPC_STAT");
    printf("sem_otime moved by the undo: %d\n", ds.sem_otime > before);
    remove_set(id);
}

static void fork_and_exec(const char *self)
{
    int id = new_set(1, 0600);
    fflush(stdout);
    pid_t middle = fork();
    if (middle == -1)
        die("fork");
    if (middle == 0) {
        struct sembuf up = { 0, 1, SEM_UNDO };
        if (semop(id, &up, 1) == -1)
            _exit(1);
        pid_t grandchild = fork();
        if (grandchild == 0)
            _exit(0);
        waitpid(grandchild, NULL, 0);
        /* The grandchild had no undo of its own: the value is still 1. */
        _exit(semctl(id, 0, GETVAL) == 1 ? 0 : 3);
    }
    int status;
    waitpid(middle, &status, 0);
    printf("fork's child exit undid nothing: %d\n", WIFEXITED(status) && WEXITSTATUS(status) == 0);
    show("value after the process with the undo exited", semctl(id, 0, GETVAL));

    fflush(stdout);
    pid_t execer = fork();
    if (execer == -1)
        die("fork");
    if (execer == 0) {
        struct sembuf up = { 0, 3, SEM_UNDO };
        if (semop(id, &up, 1) == -1)
            _exit(1);
        char idtext[32];
        snprintf(idtext, sizeof idtext, "%d", id);
        execl(self, self, "--after-exec", idtext, (char *)NULL);
        _exit(4);
    }
    waitpid(execer, &status, 0);
    printf("the exec'd program saw its own +3: %d\n", WIFEXITED(status) && WEXITSTATUS(status) == 0);
    show("value after the exec'd program exited", semctl(id, 0, GETVAL));

    /* IPC_RMID while a holder has undo; its later exit must not trip. */
    struct sembuf up = { 0, 1, SEM_UNDO };
    pid_t h = holder(id, &up, 1);
    remove_set(id);
    kill_and_reap(h);
    expect_ok("GETVAL after IPC_RMID and the holder's exit", semctl(id, 0, GETVAL));
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--after-exec") == 0)
        return semctl(atoi(argv[2]), 0, GETVAL) == 3 ? 0 : 5;
    setvbuf(stdout, NULL, _IOLBF, 0);
    killed_holder();
    clamping();
    undo_stamps_otime();
    fork_and_exec(argv[0]);
    return 0;
}
