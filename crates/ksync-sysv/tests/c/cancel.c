/* Thread cancellation: semget, semop, semtimedop and semctl are not
 * cancellation points in glibc, so a deferred cancel that is pending when a
 * thread makes one of these calls leaves the call alone and is acted on at
 * the thread's next cancellation point (here pthread_testcancel). An
 * implementation that reaches a cancellation point of its own inside the
 * call (an open, a getrandom, a nanosleep) would be cancelled there, in the
 * middle of its work, or abort the process. Each case runs in a thread of its
 * own that cancels itself first; the thread only records what happened, and
 * the main thread prints it after pthread_join (printf may itself be a
 * cancellation point). */
#include "common.h"
#include <pthread.h>

/* One call made with a cancel pending, and what became of the thread. */
struct job {
    const char *what;
    long (*call)(struct job *);
    int id;       /* the set the call works on, or the one it created */
    key_t key;    /* for the semget cases */
    long rc;
    int err;
    int returned; /* the call came back */
    int past;     /* pthread_testcancel came back: the cancel was lost */
    int kept;     /* the caller's disabled state was still disabled */
};

static void *run_job(void *arg)
{
    struct job *job = arg;
    pthread_cancel(pthread_self());
    errno = 0;
    job->rc = job->call(job);
    job->err = errno;
    job->returned = 1;
    pthread_testcancel();
    job->past = 1;
    return NULL;
}

static const char *fate(const struct job *job, void *result)
{
    if (result != PTHREAD_CANCELED)
        return "not cancelled";
    if (!job->returned)
        return "cancelled inside the call";
    return job->past ? "cancelled after pthread_testcancel" : "cancelled at pthread_testcancel";
}

static void report(const struct job *job, void *result)
{
    if (!job->returned)
        printf("%s: did not return, %s\n", job->what, fate(job, result));
    else if (job->rc == -1)
        printf("%s: -1 %s, %s\n", job->what, errno_name(job->err), fate(job, result));
    else
        printf("%s: ok, %s\n", job->what, fate(job, result));
}

/* Starts `job` in a thread and returns it, for a case the main thread must
 * act on while the call runs (a post that wakes it). */
static pthread_t start(struct job *job)
{
    pthread_t t;
    if (pthread_create(&t, NULL, run_job, job) != 0)
        die("pthread_create");
    return t;
}

static void finish(pthread_t t, const struct job *job)
{
    void *result = NULL;
    if (pthread_join(t, &result) != 0)
        die("pthread_join");
    report(job, result);
}

static void run(struct job *job)
{
    finish(start(job), job);
}

static long create_private(struct job *job)
{
    return job->id = semget(IPC_PRIVATE, 2, IPC_CREAT | 0600);
}

static long create_key(struct job *job)
{
    return job->id = semget(job->key, 2, IPC_CREAT | IPC_EXCL | 0600);
}

static long find_key(struct job *job)
{
    return semget(job->key, 0, 0);
}

static struct sembuf down = { 0, -1, 0 };
static struct sembuf up = { 0, 1, 0 };

/* The first semop of a fresh thread (the library finds the set), then one
 * it may finish lock-free. */
static long up_then_down(struct job *job)
{
    if (semop(job->id, &up, 1) == -1)
        return -1;
    return semop(job->id, &down, 1);
}

static long timed_out(struct job *job)
{
    struct timespec limit = { 0, 50 * 1000 * 1000 };
    return semtimedop(job->id, &down, 1, &limit);
}

static long woken_timed(struct job *job)
{
    struct timespec limit = { 10, 0 };
    return semtimedop(job->id, &down, 1, &limit);
}

static long woken(struct job *job)
{
    return semop(job->id, &down, 1);
}

static long undo_pair(struct job *job)
{
    struct sembuf ops[2] = { { 1, 1, SEM_UNDO }, { 1, -1, SEM_UNDO } };
    return semop(job->id, ops, 2);
}

static long control(struct job *job)
{
    union semun arg;
    arg.val = 3;
    if (semctl(job->id, 1, SETVAL, arg) == -1)
        return -1;
    unsigned short values[2];
    arg.array = values;
    if (semctl(job->id, 0, GETALL, arg) == -1)
        return -1;
    struct semid_ds ds;
    arg.buf = &ds;
    if (semctl(job->id, 0, IPC_STAT, arg) == -1)
        return -1;
    struct seminfo info;
    arg.__buf = &info;
    if (semctl(job->id, 0, SEM_INFO, arg) == -1)
        return -1;
    return semctl(job->id, 1, GETVAL) == 3 ? 0 : -1;
}

static long remove_it(struct job *job)
{
    return semctl(job->id, 0, IPC_RMID);
}

/* The caller's own choice is kept: with cancellation disabled around the
 * calls, the pending cancel waits until the thread enables it again. */
static void *disabled_around(void *arg)
{
    struct job *job = arg;
    int old;
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
    pthread_cancel(pthread_self());
    struct timespec limit = { 0, 20 * 1000 * 1000 };
    job->rc = semtimedop(job->id, &down, 1, &limit) == -1 && errno == EAGAIN ? 0 : -1;
    job->returned = 1;
    pthread_testcancel();
    job->past = 1;
    pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &old);
    job->kept = old == PTHREAD_CANCEL_DISABLE;
    pthread_testcancel();
    return NULL;
}

/* Asynchronous cancellation, requested by another thread while the call
 * sleeps: the kernel's call is cancelled where it sleeps, the library's
 * when it comes back (it runs with cancellation disabled, and enabling it
 * again acts on the cancel at once). Either way the thread goes no further
 * than the call. */
static void *async_sleeper(void *arg)
{
    struct job *job = arg;
    int old;
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &old);
    struct timespec limit = { 0, 200 * 1000 * 1000 };
    job->rc = semtimedop(job->id, &down, 1, &limit);
    job->returned = 1;
    pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &old);
    return NULL;
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    void *result;
    pthread_t t;

    struct job priv = { .what = "01 semget IPC_PRIVATE", .call = create_private };
    run(&priv);
    struct job by_key = { .what = "02 semget IPC_CREAT|IPC_EXCL new key",
                          .call = create_key,
                          .key = private_key(1) };
    run(&by_key);
    struct job found = { .what = "03 semget existing key", .call = find_key, .key = by_key.key };
    run(&found);
    if (priv.id == -1 || by_key.id == -1)
        die("semget");
    int id = priv.id;

    /* Sets another process made: one found by its key, one whose id comes
     * through a pipe, as ids pass between processes, so that this process
     * first meets it in a semop (the library opens it then). */
    key_t other_key = private_key(2);
    int pipe_fds[2];
    if (pipe(pipe_fds) == -1)
        die("pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == -1)
        die("fork");
    if (pid == 0) {
        int made[2] = { semget(other_key, 1, IPC_CREAT | IPC_EXCL | 0600),
                        semget(IPC_PRIVATE, 1, IPC_CREAT | 0600) };
        int sent = made[0] != -1 && made[1] != -1 &&
                   write(pipe_fds[1], &made[1], sizeof made[1]) == sizeof made[1];
        _exit(sent ? 0 : 1);
    }
    int status;
    if (waitpid(pid, &status, 0) == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        printf("creating child died or failed\n");
    int piped = -1;
    if (read(pipe_fds[0], &piped, sizeof piped) != sizeof piped)
        die("read");
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    struct job other = { .what = "04 semget a set another process created",
                         .call = find_key,
                         .key = other_key };
    run(&other);
    struct job other_op = { .what = "05 semop +1, -1 on a set first met here",
                            .call = up_then_down,
                            .id = piped };
    run(&other_op);

    struct job ops = { .what = "06 semop +1, -1", .call = up_then_down, .id = id };
    run(&ops);
    struct job timed = { .what = "07 semtimedop -1 past its timeout", .call = timed_out, .id = id };
    run(&timed);

    struct job wake_timed = { .what = "08 semtimedop -1 woken by another thread",
                              .call = woken_timed,
                              .id = id };
    t = start(&wake_timed);
    if (wait_sleepers(id, 0, GETNCNT, 1) && semop(id, &up, 1) == -1)
        die("semop +1");
    finish(t, &wake_timed);
    struct job wake = { .what = "09 semop -1 woken by another thread", .call = woken, .id = id };
    t = start(&wake);
    if (wait_sleepers(id, 0, GETNCNT, 1) && semop(id, &up, 1) == -1)
        die("semop +1");
    finish(t, &wake);

    struct job undo = { .what = "10 semop SEM_UNDO +1 -1", .call = undo_pair, .id = id };
    run(&undo);
    struct job ctl = { .what = "11 semctl SETVAL, GETALL, IPC_STAT, SEM_INFO, GETVAL",
                       .call = control,
                       .id = id };
    run(&ctl);
    struct job rm = { .what = "12 semctl IPC_RMID", .call = remove_it, .id = by_key.id };
    run(&rm);
    struct job rm_other = { .what = "13 semctl IPC_RMID, set of another process",
                            .call = remove_it,
                            .id = piped };
    run(&rm_other);

    struct job disabled = { .id = id };
    if (pthread_create(&t, NULL, disabled_around, &disabled) != 0)
        die("pthread_create");
    if (pthread_join(t, &result) != 0)
        die("pthread_join");
    printf("14 semtimedop with cancellation disabled: %s, %s, state kept: %s\n",
           disabled.rc == 0 ? "EAGAIN" : "wrong",
           disabled.past ? "not cancelled while disabled" : "cancelled", disabled.kept ? "yes" : "no");
    printf("14 cancelled once enabled: %s\n", result == PTHREAD_CANCELED ? "yes" : "no");

    struct job async = { .id = id };
    if (pthread_create(&t, NULL, async_sleeper, &async) != 0)
        die("pthread_create");
    if (wait_sleepers(id, 0, GETNCNT, 1))
        pthread_cancel(t);
    if (pthread_join(t, &result) != 0)
        die("pthread_join");
    printf("15 asynchronous cancel during a sleeping semtimedop: %s, went past the call: %s\n",
           result == PTHREAD_CANCELED ? "cancelled" : "not cancelled", async.returned ? "yes" : "no");

    remove_set(id);
    remove_set(semget(other_key, 0, 0));
    return 0;
}
