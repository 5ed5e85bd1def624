/* Calls made after the main thread has called pthread_exit, from the one
 * thread left: a program whose main thread starts its workers and leaves.
 * Operations in mmap'd memory and results copied out (IPC_STAT, GETALL)
 * go through the library's checked copies, which must not depend on the
 * main thread being alive. */
#include "common.h"
#include <pthread.h>
#include <sys/mman.h>

static int g_id;

static void *worker(void *unused)
{
    (void)unused;
    /* Let the main thread finish exiting first. */
    struct timespec pause = { 0, 50 * 1000 * 1000 };
    nanosleep(&pause, NULL);
    struct semid_ds ds;
    union semun arg = { .buf = &ds };
    expect_ok("IPC_STAT after main exited", semctl(g_id, 0, IPC_STAT, arg));
    printf("nsems: %lu\n", (unsigned long)ds.sem_nsems);
    struct sembuf *ops = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ops == MAP_FAILED)
        die("mmap");
    ops[0] = (struct sembuf){ 1, 2, 0 };
    expect_ok("semop from an mmap'd page after main exited", semop(g_id, ops, 1));
    unsigned short values[2];
    union semun all = { .array = values };
    expect_ok("GETALL after main exited", semctl(g_id, 0, GETALL, all));
    printf("values: %u %u\n", values[0], values[1]);
    unsigned short set[2] = { 3, 4 };
    union semun setall = { .array = set };
    expect_ok("SETALL after main exited", semctl(g_id, 0, SETALL, setall));
    show("GETVAL 1", semctl(g_id, 1, GETVAL));
    remove_set(g_id);
    fflush(stdout);
    return NULL;
}

int main(void)
{
    g_id = new_set(2, 0600);
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) != 0)
        die("pthread_create");
    pthread_exit(NULL);
}
