/* A signal handler installed with SA_RESTART still ends a sleeping semop(2)
 * with EINTR: the kernel never restarts semop after a handler ran
 * (signal(7)), however many threads sleep. Each round puts `threads`
 * threads of this process to sleep on a -1 of one semaphore, sends each a
 * SIGUSR1 in turn, 20 ms apart (so that none lands while its thread is
 * between its queueing and its sleep), and shows who is still asleep
 * afterwards and how the calls ended.
 *
 * ksync's shared sets sleep differently with 16 or more sleepers of a
 * process in a set (all but one without a timeout of their own); the
 * rounds run below and above that crowd. */
#include "common.h"
#include <pthread.h>

#define MOST_THREADS 20

static int g_set;
static int g_result[MOST_THREADS];

static void on_signal(int sig)
{
    (void)sig;
}

static void *sleeper(void *arg)
{
    int *result = arg;
    struct sembuf down = { 0, -1, 0 };
    *result = semop(g_set, &down, 1) == 0 ? 0 : errno;
    return NULL;
}

static void round_of(int threads)
{
    g_set = new_set(1, 0600);
    pthread_t t[MOST_THREADS];
    for (int i = 0; i < threads; i++) {
        g_result[i] = -1;
        if (pthread_create(&t[i], NULL, sleeper, &g_result[i]) != 0)
            die("pthread_create");
    }
    wait_sleepers(g_set, 0, GETNCNT, threads);
    /* Past any polling before the sleep itself. */
    sleep_ms(20);
    for (int i = 0; i < threads; i++) {
        if (pthread_kill(t[i], SIGUSR1) != 0)
            die("pthread_kill");
        sleep_ms(20);
    }
    sleep_ms(500);
    char what[80];
    snprintf(what, sizeof what, "%d sleepers, GETNCNT after a SIGUSR1 each", threads);
    show(what, semctl(g_set, 0, GETNCNT));
    /* Wakes whoever slept on, so that every thread can be joined. */
    union semun all = { .val = threads };
    if (semctl(g_set, 0, SETVAL, all) == -1)
        die("semctl(SETVAL)");
    int interrupted = 0, succeeded = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(t[i], NULL);
        interrupted += g_result[i] == EINTR;
        succeeded += g_result[i] == 0;
    }
    printf("%d sleepers, EINTR: %d\n", threads, interrupted);
    printf("%d sleepers, successes: %d\n", threads, succeeded);
    remove_set(g_set);
}

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sa.sa_flags = SA_RESTART;
    if (sigaction(SIGUSR1, &sa, NULL) == -1)
        die("sigaction");
    round_of(4);
    round_of(MOST_THREADS);
    return 0;
}
