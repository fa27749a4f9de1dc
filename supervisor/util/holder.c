/* Who holds a port: a bind probe, then /proc/net and /proc/PID/fd (see holder.h). */
#include "config.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "supervisor/util/holder.h"

#define INODES_MAX 64 /* sockets on one port we look at; more are not needed to name one */

typedef struct inode_set {
    unsigned long v[INODES_MAX];
    size_t n;
} inode_set;

/* 0 when the probe bound (free), else the errno of the failed bind. */
static int probe_bind(const struct sockaddr *addr, int type)
{
    socklen_t len = addr->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                : sizeof(struct sockaddr_in);
    int fd = socket(addr->sa_family, type | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    int one = 1;
    if (type == SOCK_STREAM)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (addr->sa_family == AF_INET6) {
        int v6only = !IN6_IS_ADDR_UNSPECIFIED(&((const struct sockaddr_in6 *)addr)->sin6_addr);
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, sizeof v6only);
    }
    int rc = bind(fd, addr, len) == 0 ? 0 : errno;
    close(fd);
    return rc;
}

/* Inodes of the sockets in one /proc/net table bound to @p port (TCP: listening only). */
static void sockets_on_port(const char *table, unsigned port, bool listening_only, inode_set *out)
{
    FILE *f = fopen(table, "re");
    if (f == NULL)
        return;
    char line[512];
    if (fgets(line, sizeof line, f) == NULL) { /* header */
        fclose(f);
        return;
    }
    while (fgets(line, sizeof line, f) != NULL && out->n < INODES_MAX) {
        char local[64];
        unsigned lport = 0, state = 0;
        unsigned long inode = 0;
        /* sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode */
        if (sscanf(line, " %*s %63[0-9A-Fa-f]:%x %*s %x %*s %*s %*s %*u %*u %lu", local, &lport,
                   &state, &inode) != 4)
            continue;
        if (lport != port || inode == 0 || (listening_only && state != 0x0A))
            continue;
        out->v[out->n++] = inode;
    }
    fclose(f);
}

/* The inode of a "socket:[N]" link, or 0. */
static unsigned long socket_inode(const char *dir, const char *name)
{
    char path[320], target[64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n <= 0)
        return 0;
    target[n] = '\0';
    unsigned long inode = 0;
    return sscanf(target, "socket:[%lu]", &inode) == 1 ? inode : 0;
}

static bool set_has(const inode_set *s, unsigned long inode)
{
    for (size_t i = 0; i < s->n; i++)
        if (s->v[i] == inode)
            return true;
    return false;
}

/* Remove from @p s the inodes this process holds. */
static void drop_own(inode_set *s)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && s->n > 0) {
        unsigned long inode = socket_inode("/proc/self/fd", e->d_name);
        for (size_t i = 0; inode != 0 && i < s->n; i++) {
            if (s->v[i] == inode) {
                s->v[i] = s->v[--s->n];
                break;
            }
        }
    }
    closedir(d);
}

static bool all_digits(const char *s)
{
    for (; *s != '\0'; s++)
        if (!isdigit((unsigned char)*s))
            return false;
    return true;
}

/* Name a process holding one of @p s's inodes: "pid N (comm)". false when none is visible. */
static bool name_holder(const inode_set *s, char *who, size_t cap)
{
    DIR *proc = opendir("/proc");
    if (proc == NULL)
        return false;
    char self[24];
    snprintf(self, sizeof self, "%ld", (long)getpid());
    bool found = false;
    struct dirent *p;
    while (!found && (p = readdir(proc)) != NULL) {
        if (!all_digits(p->d_name) || strcmp(p->d_name, self) == 0)
            continue;
        char fddir[300];
        snprintf(fddir, sizeof fddir, "/proc/%s/fd", p->d_name);
        DIR *d = opendir(fddir);
        if (d == NULL)
            continue; /* another user's process, or gone */
        struct dirent *e;
        while (!found && (e = readdir(d)) != NULL)
            found = set_has(s, socket_inode(fddir, e->d_name));
        closedir(d);
        if (found) {
            char comm[64] = "";
            char path[300];
            snprintf(path, sizeof path, "/proc/%s/comm", p->d_name);
            FILE *f = fopen(path, "re");
            if (f != NULL) {
                if (fgets(comm, sizeof comm, f) != NULL)
                    comm[strcspn(comm, "\n")] = '\0';
                fclose(f);
            }
            snprintf(who, cap, "pid %s (%s)", p->d_name, comm[0] != '\0' ? comm : "?");
        }
    }
    closedir(proc);
    return found;
}

int sv_addr_held_elsewhere(const struct sockaddr *addr, int type, char *who, size_t cap)
{
    char scratch[8];
    if (who == NULL) {
        who = scratch;
        cap = sizeof scratch;
    }
    if (addr->sa_family != AF_INET && addr->sa_family != AF_INET6)
        return 0;
    if (probe_bind(addr, type) != EADDRINUSE)
        return 0;
    unsigned port = ntohs(addr->sa_family == AF_INET
                              ? ((const struct sockaddr_in *)addr)->sin_port
                              : ((const struct sockaddr_in6 *)addr)->sin6_port);
    bool tcp = type == SOCK_STREAM;
    inode_set s = {.n = 0};
    sockets_on_port(tcp ? "/proc/net/tcp" : "/proc/net/udp", port, tcp, &s);
    sockets_on_port(tcp ? "/proc/net/tcp6" : "/proc/net/udp6", port, tcp, &s);
    drop_own(&s);
    if (s.n == 0)
        return 0; /* only ours (a rebind on reload), or nothing we can see */
    if (!name_holder(&s, who, cap))
        snprintf(who, cap, "another process");
    return -EADDRINUSE;
}
