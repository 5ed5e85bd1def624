/* A fork child that closes every descriptor it inherited, then uses a set.
 *
 * Some daemons close every descriptor above 2 in the children they fork; the
 * kernel's sets take no descriptor, so their calls go on working. The
 * library's handle on the set keeps a descriptor whose byte-range locks say
 * a process is alive; the child must not take its locks on whatever file the
 * number names by then (here /dev/null, open for reading and writing as a
 * daemon's would be), or the parent would take it for dead and give back
 * its undo while it lives. */
#include "common.h"
#include <fcntl.h>

int main(void)
{
    int id = new_set(1, 0600);
    /* The parent uses the set first, so that the handle, and its
     * descriptor, exist before the fork. */
    struct sembuf up = { 0, 1, 0 };
    show("01 parent's semop +1", semop(id, &up, 1));

    int to_parent[2], to_child[2];
    if (pipe(to_parent) == -1 || pipe(to_child) == -1)
        die("pipe");
    fflush(stdout);
    pid_t pid = fork();
    if (pid == -1)
        die("fork");
    if (pid == 0) {
        for (int fd = 3; fd < 1024; fd++)
            if (fd != to_parent[1] && fd != to_child[0])
                close(fd);
        /* The lowest numbers, the library's among them, now name /dev/null. */
        for (int i = 0; i < 16; i++)
            open("/dev/null", O_RDWR);
        struct sembuf hold = { 0, 1, SEM_UNDO };
        char ok = semop(id, &hold, 1) == 0 ? 'y' : 'n';
        if (write(to_parent[1], &ok, 1) != 1)
            _exit(1);
        char go;
        if (read(to_child[0], &go, 1) != 1)
            _exit(1);
        _exit(0);
    }
    close(to_parent[1]);
    close(to_child[0]);
    char ok = 'n';
    if (read(to_parent[0], &ok, 1) != 1)
        ok = 'n';
    printf("02 child's semop +1 with SEM_UNDO, after closing its descriptors: %s\n",
           ok == 'y' ? "ok" : "failed");
    /* A control call looks for dead processes first: were the child taken
     * for dead, its unit would be given back here. */
    show("03 value while the child lives", semctl(id, 0, GETVAL));
    if (write(to_child[1], "x", 1) != 1)
        die("write");
    int status;
    waitpid(pid, &status, 0);
    show("04 child's exit status", WIFEXITED(status) ? WEXITSTATUS(status) : -2);
    show("05 value after its exit", semctl(id, 0, GETVAL));
    remove_set(id);
    return 0;
}
