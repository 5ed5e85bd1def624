/* An unmodified C program's down + up pair: one process takes and gives back
 * one semaphore nobody else uses, with semop(2), and prints the best of five
 * rounds in nanoseconds per pair. Run it against the kernel and with
 * LD_PRELOAD=libksync_sysv.so to compare the two.
 *
 *   cc -O2 -o sem_pair sem_pair.c && ./sem_pair [pairs per round] [stack|static|heap]
 *
 * The last argument says where the two struct sembuf live (a local variable
 * by default): a preloading library may read each place its own way.
 *
 * The figure goes to stderr, so that stdout (the checks) stays the same in
 * every run and the conformance tests can compare it. */
#include "common.h"

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    long pairs = argc > 1 ? atol(argv[1]) : 200000;
    if (pairs < 1)
        pairs = 1;
    const char *where = argc > 2 ? argv[2] : "stack";
    static struct sembuf in_static[2];
    struct sembuf on_stack[2];
    struct sembuf *ops = on_stack;
    if (strcmp(where, "static") == 0)
        ops = in_static;
    else if (strcmp(where, "heap") == 0 && (ops = malloc(2 * sizeof *ops)) == NULL)
        die("malloc");
    else if (strcmp(where, "stack") != 0 && strcmp(where, "heap") != 0) {
        fprintf(stderr, "where: stack, static or heap\n");
        return 2;
    }
    int id = new_set(1, 0600);
    union semun one = { .val = 1 };
    semctl(id, 0, SETVAL, one);
    ops[0] = (struct sembuf){ 0, -1, 0 };
    ops[1] = (struct sembuf){ 0, 1, 0 };
    struct sembuf *down = &ops[0], *up = &ops[1];
    double best = 0;
    int failed = 0;
    for (int round = 0; round < 5; round++) {
        double start = now_ns();
        for (long i = 0; i < pairs; i++) {
            failed |= semop(id, down, 1) != 0;
            failed |= semop(id, up, 1) != 0;
        }
        double per_pair = (now_ns() - start) / pairs;
        if (round == 0 || per_pair < best)
            best = per_pair;
    }
    printf("every semop succeeded: %d\n", !failed);
    show("value at the end", semctl(id, 0, GETVAL));
    remove_set(id);
    fprintf(stderr, "down+up: %.1f ns per pair (best of 5 rounds of %ld, sembufs: %s)\n", best, pairs,
            where);
    if (ops != on_stack && ops != in_static)
        free(ops);
    return 0;
}
