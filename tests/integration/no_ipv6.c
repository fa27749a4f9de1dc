/*
 * LD_PRELOAD shim for t-udp-no-ipv6.sh: socket(AF_INET6, ...) fails with EAFNOSUPPORT, as on a
 * host booted with ipv6.disable=1 (issue 8: direct UDP must still serve IPv4 destinations).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <sys/socket.h>

int socket(int domain, int type, int protocol)
{
    static int (*real)(int, int, int);
    if (domain == AF_INET6) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    if (real == NULL)
        *(void **)&real = dlsym(RTLD_NEXT, "socket");
    return real(domain, type, protocol);
}
