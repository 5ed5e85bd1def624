/* Which shared object answers each System V semaphore call: prints "libc"
 * or "libksync_sysv" for semget, semop, semtimedop and semctl, so the tests
 * can tell that LD_PRELOAD (or linking) really put the library in front.
 * Then one call of each through the variadic semctl, to show the arguments
 * arrive. */
#include "common.h"
#include <dlfcn.h>

static void who(const char *name, void *fn)
{
    Dl_info info;
    const char *object = "unknown";
    if (dladdr(fn, &info) != 0 && info.dli_fname != NULL) {
        if (strstr(info.dli_fname, "libksync_sysv") != NULL)
            object = "libksync_sysv";
        else if (strstr(info.dli_fname, "libc.so") != NULL)
            object = "libc";
    }
    printf("%s: %s\n", name, object);
}

int main(void)
{
    who("semget", (void *)semget);
    who("semop", (void *)semop);
    who("semtimedop", (void *)semtimedop);
    who("semctl", (void *)semctl);
    int id = new_set(3, 0600);
    union semun v = { .val = 42 };
    expect_ok("SETVAL 42 through the variadic call", semctl(id, 2, SETVAL, v));
    show("GETVAL", semctl(id, 2, GETVAL));
    struct sembuf op = { 2, -2, 0 };
    expect_ok("semop -2", semop(id, &op, 1));
    show("GETVAL after semop", semctl(id, 2, GETVAL));
    remove_set(id);
    return 0;
}
