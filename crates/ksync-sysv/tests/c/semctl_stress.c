/* Atomic multi-operation semop with SEM_UNDO under load: the case of LTP's
 * semctl06, written for this project. Two sets of five semaphores, each
 * started at a fixed value in [100, 1000); four processes per set take random
 * amounts (under half the value) from all five at once and give them back,
 * 300 times each, all with SEM_UNDO. At the end every value is where it
 * started and nobody is left asleep. */
#include "common.h"

#define SETS 2
#define NUMS 5
#define KIDS 4
#define ROUNDS 300

int main(void)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int ids[SETS];
    unsigned short start[SETS][NUMS];
    srand(6);
    for (int s = 0; s < SETS; s++) {
        ids[s] = new_set(NUMS, 0600);
        for (int n = 0; n < NUMS; n++)
            start[s][n] = 100 + rand() % 900;
        union semun arg = { .array = start[s] };
        expect_ok("06 SETALL start values", semctl(ids[s], 0, SETALL, arg));
    }
    fflush(stdout);
    pid_t kids[SETS * KIDS];
    for (int s = 0; s < SETS; s++) {
        for (int k = 0; k < KIDS; k++) {
            pid_t pid = fork();
            if (pid == -1)
                die("fork");
            if (pid == 0) {
                srand(s * KIDS + k + 1);
                for (int r = 0; r < ROUNDS; r++) {
                    struct sembuf take[NUMS], give[NUMS];
                    for (int n = 0; n < NUMS; n++) {
                        short amount = 1 + rand() % (start[s][n] / 2);
                        take[n] = (struct sembuf){ n, -amount, SEM_UNDO };
                        give[n] = (struct sembuf){ n, amount, SEM_UNDO };
                    }
                    if (semop(ids[s], take, NUMS) == -1 || semop(ids[s], give, NUMS) == -1)
                        _exit(1);
                }
                _exit(0);
            }
            kids[s * KIDS + k] = pid;
        }
    }
    int failed = 0;
    for (int i = 0; i < SETS * KIDS; i++) {
        int status;
        waitpid(kids[i], &status, 0);
        failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
    }
    printf("06 every process finished its rounds: %d\n", !failed);
    for (int s = 0; s < SETS; s++) {
        unsigned short now[NUMS];
        union semun arg = { .array = now };
        semctl(ids[s], 0, GETALL, arg);
        int same = memcmp(now, start[s], sizeof now) == 0;
        int sleepers = 0;
        for (int n = 0; n < NUMS; n++)
            sleepers += semctl(ids[s], n, GETNCNT) + semctl(ids[s], n, GETZCNT);
        printf("06 set %d values back at the start: %d, sleepers left: %d\n", s, same, sleepers);
        remove_set(ids[s]);
    }
    return 0;
}
