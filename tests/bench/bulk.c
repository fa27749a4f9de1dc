/*
 * bulk: loopback load tools for tests/bench/bench.sh (not part of katana).
 *
 *   bulk sink PORT            accept connections on 127.0.0.1:PORT, read and discard;
 *                             when a connection that carried data closes, or once it
 *                             has been silent for a second, print "BYTES SECONDS" (first
 *                             byte to last byte) on stdout, once per connection (some
 *                             servers keep the destination open after the client's close).
 *                             Keeps every other connection open (idle ones too).
 *   bulk send PORT SECONDS [FIRST [DEST [MBIT]]]
 *                             connect to 127.0.0.1:PORT, write 256 KiB blocks for SECONDS,
 *                             close; print the bytes written (also when a write failed:
 *                             the transfer was cut, exit 1). With FIRST (not 0), the first
 *                             FIRST bytes (at most 256 KiB) go alone, 50 ms before the blocks.
 *                             With DEST (not 0), PORT is a SOCKS5 server asked to CONNECT to
 *                             127.0.0.1:DEST first. With MBIT, TCP paces the socket at MBIT
 *                             Mbit/s (SO_MAX_PACING_RATE).
 *   bulk hold PORT N [DEST]   open N connections to 127.0.0.1:PORT, write one byte on each,
 *                             print "ready N" and keep them open until stdin closes. With
 *                             DEST, PORT is a SOCKS5 server (no auth): each connection first
 *                             asks it to CONNECT to 127.0.0.1:DEST.
 *   bulk relay PORT TO        accept connections on 127.0.0.1:PORT one at a time and copy each
 *                             one way to a new connection to 127.0.0.1:TO: level-triggered
 *                             epoll, reads of 256 KiB, TCP_NODELAY, nothing else (the floor a
 *                             relay's kernel time cannot go below, ssrelay-bench.sh).
 *   bulk splice PORT          a SOCKS5 relay on 127.0.0.1:PORT (no auth, CONNECT to an IPv4
 *                             address, always dialled on 127.0.0.1) that moves bytes with
 *                             splice(2) alone through a 1 MiB pipe, one blocking thread per
 *                             direction: what the kernel charges for a relay that only splices
 *                             (peers-bench.sh's Vision floor).
 *   bulk sockmap PORT         the same SOCKS5 front, then no copy in user space at all: both
 *                             sockets go into a BPF SOCKMAP whose stream verdict program
 *                             redirects each one's data to the other's send path
 *                             (bpf_sk_redirect_map); the process only waits for the EOFs and
 *                             passes them on. One connection at a time; needs root (CAP_BPF,
 *                             CAP_NET_ADMIN). Loaded with bpf(2) alone: no libbpf, no
 *                             compiler (sockmap-bench.sh).
 *
 * Loopback only by construction (the address is fixed).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <fcntl.h>
#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_acked/received */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/bpf.h>
#include <poll.h>
#include <stddef.h>
#include <linux/sockios.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define BLOCK (256 * 1024)
#define MAX_FDS 200000

struct conn_stat {
    unsigned long long bytes;
    double first, last;
    int reported;
};

#define QUIET_SECONDS 1.0

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static struct sockaddr_in loopback(int port)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((unsigned short)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sa;
}

static int dial(int port)
{
    struct sockaddr_in sa = loopback(port);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* Accept one pending connection: 1 accepted (or dropped), 0 none pending, -1 error. */
static int sink_accept(int lfd, int ep, struct conn_stat *st)
{
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
    if (fd < 0)
        return errno == EAGAIN || errno == EINTR ? 0 : -1;
    if (fd >= MAX_FDS) {
        close(fd);
        return 1;
    }
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    st[fd].bytes = 0;
    st[fd].first = 0;
    st[fd].reported = 0;
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) {
        close(fd);
        return -1;
    }
    return 1;
}

/* Print "BYTES SECONDS" for a connection that carried bulk data, once. */
static void sink_report(int fd, struct conn_stat *st)
{
    if (st[fd].bytes > 1 && !st[fd].reported) {
        printf("%llu %.6f\n", st[fd].bytes, st[fd].last - st[fd].first);
        fflush(stdout);
        st[fd].reported = 1;
    }
}

static void sink_read(int fd, struct conn_stat *st, char *buf)
{
    for (;;) {
        ssize_t n = read(fd, buf, BLOCK);
        if (n > 0) {
            st[fd].last = now();
            if (st[fd].bytes == 0)
                st[fd].first = st[fd].last;
            st[fd].bytes += (unsigned long long)n;
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        /* EOF or error: report a connection that carried bulk data */
        sink_report(fd, st);
        st[fd].bytes = 0;
        close(fd);
        return;
    }
}

static int run_sink(int port)
{
    struct sockaddr_in sa = loopback(port);
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 4096) < 0) {
        perror("bulk sink: bind/listen");
        return 1;
    }
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd}, evs[256];
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    struct conn_stat *st = calloc(MAX_FDS, sizeof(*st));
    char *buf = malloc(BLOCK);
    if (!st || !buf)
        return 1;
    int max_fd = lfd;
    for (;;) {
        int n = epoll_wait(ep, evs, 256, 250);
        for (int i = 0; i < n; i++) {
            if (evs[i].data.fd == lfd) {
                while (sink_accept(lfd, ep, st) > 0)
                    ;
            } else {
                if (evs[i].data.fd > max_fd)
                    max_fd = evs[i].data.fd;
                sink_read(evs[i].data.fd, st, buf);
            }
        }
        double t = now();
        for (int fd = lfd + 1; fd <= max_fd; fd++)
            if (st[fd].bytes > 1 && t - st[fd].last >= QUIET_SECONDS)
                sink_report(fd, st);
    }
}

static int socks_connect(int fd, int dest);

static int run_send(int port, double seconds, size_t first, int socks_dest, unsigned mbit)
{
    int fd = dial(port);
    if (fd < 0) {
        perror("bulk send: connect");
        return 1;
    }
    /* TCP's own pacing (no fq qdisc needed), in bytes per second */
    unsigned rate = mbit * 125000u;
    if (mbit > 0 && setsockopt(fd, SOL_SOCKET, SO_MAX_PACING_RATE, &rate, sizeof(rate)) < 0)
        perror("bulk send: SO_MAX_PACING_RATE");
    if (socks_dest > 0 && socks_connect(fd, socks_dest) < 0) {
        fprintf(stderr, "bulk send: the SOCKS5 CONNECT failed\n");
        close(fd);
        return 1;
    }
    char *buf = malloc(BLOCK);
    if (!buf)
        return 1;
    for (size_t i = 0; i < BLOCK; i++)
        buf[i] = (char)(i * 131 + 7);
    unsigned long long total = 0;
    if (first > 0) {
        ssize_t n = send(fd, buf, first < BLOCK ? first : BLOCK, MSG_NOSIGNAL);
        if (n > 0)
            total += (unsigned long long)n;
        usleep(50000);
    }
    double end = now() + seconds;
    int cut = 0;
    while (now() < end) {
        ssize_t n = send(fd, buf, BLOCK, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            perror("bulk send: write");
            cut = 1;
            break;
        }
        total += (unsigned long long)n;
    }
    close(fd);
    printf("%llu\n", total);
    free(buf);
    return cut;
}

/* Read exactly @p n bytes from the blocking @p fd. @return 0, or -1 (EOF or an error). */
static int read_exact(int fd, unsigned char *buf, size_t n)
{
    for (size_t got = 0; got < n;) {
        ssize_t r = read(fd, buf + got, n - got);
        if (r <= 0)
            return -1;
        got += (size_t)r;
    }
    return 0;
}

/* SOCKS5 (RFC 1928), no authentication: ask the server on @p fd to CONNECT to 127.0.0.1:@p
 * dest. @return 0 once it answered success, -1 otherwise. */
static int socks_connect(int fd, int dest)
{
    unsigned char hello[3] = {5, 1, 0}, req[10] = {5, 1, 0, 1, 127, 0, 0, 1,
                                                    (unsigned char)(dest >> 8),
                                                    (unsigned char)dest};
    unsigned char ans[10];
    if (write(fd, hello, sizeof hello) != (ssize_t)sizeof hello || read_exact(fd, ans, 2) < 0 ||
        ans[0] != 5 || ans[1] != 0)
        return -1;
    /* the answer to an IPv4 request carries an IPv4 bound address: 10 bytes */
    if (write(fd, req, sizeof req) != (ssize_t)sizeof req || read_exact(fd, ans, 10) < 0 ||
        ans[1] != 0)
        return -1;
    return 0;
}

static int run_hold(int port, int count, int socks_dest)
{
    int opened = 0;
    for (int i = 0; i < count; i++) {
        int fd = dial(port);
        if (fd >= 0 && socks_dest > 0 && socks_connect(fd, socks_dest) < 0) {
            close(fd);
            fd = -1;
            errno = EPROTO;
        }
        if (fd < 0) {
            fprintf(stderr, "bulk hold: connection %d: %s\n", i, strerror(errno));
            break;
        }
        if (write(fd, "x", 1) != 1) {
            close(fd);
            break;
        }
        opened++;
    }
    printf("ready %d\n", opened);
    fflush(stdout);
    char c;
    while (read(0, &c, 1) > 0)
        ;
    return opened == count ? 0 : 1;
}

/* Copy @p from to @p to until EOF or an error; @p to is a blocking socket. */
static void relay_one(int from, int to, char *buf)
{
    int ep = epoll_create1(0), one = 1;
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = from};
    setsockopt(from, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(to, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, from, &ev) < 0)
        goto out;
    for (;;) {
        if (epoll_wait(ep, &ev, 1, -1) < 0 && errno != EINTR)
            break;
        ssize_t n = read(from, buf, BLOCK);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n <= 0)
            break;
        for (ssize_t off = 0, w; off < n; off += w)
            if ((w = write(to, buf + off, (size_t)(n - off))) < 0)
                goto out;
    }
out:
    if (ep >= 0)
        close(ep);
}

static int run_relay(int port, int to_port)
{
    struct sockaddr_in sa = loopback(port);
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    char *buf = malloc(BLOCK);
    if (buf == NULL || bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 16) < 0) {
        perror("bulk relay: bind/listen");
        return 1;
    }
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK);
        if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
            continue;
        if (fd < 0) {
            perror("bulk relay: accept");
            return 1;
        }
        int to = dial(to_port);
        if (to >= 0) {
            relay_one(fd, to, buf);
            close(to);
        }
        close(fd);
    }
}

struct splice_dir {
    int from, to;
};

/* One direction of a spliced connection: socket to pipe to socket until EOF, then pass the
 * EOF on. */
static void *splice_dir_run(void *arg)
{
    struct splice_dir *d = arg;
    int pipefd[2];
    if (pipe(pipefd) < 0)
        return NULL;
    (void)fcntl(pipefd[1], F_SETPIPE_SZ, 1 << 20);
    for (;;) {
        ssize_t n = splice(d->from, NULL, pipefd[1], NULL, 1 << 20, SPLICE_F_MOVE | SPLICE_F_MORE);
        if (n <= 0)
            break;
        while (n > 0) {
            ssize_t m = splice(pipefd[0], NULL, d->to, NULL, (size_t)n, SPLICE_F_MOVE | SPLICE_F_MORE);
            if (m <= 0)
                goto out;
            n -= m;
        }
    }
out:
    shutdown(d->to, SHUT_WR);
    close(pipefd[0]);
    close(pipefd[1]);
    return NULL;
}

/* One SOCKS5 client: the handshake, the dial, then both directions spliced. */
static void *splice_conn(void *arg)
{
    int fd = (int)(intptr_t)arg, to = -1;
    unsigned char req[10], ok[10] = {5, 0, 0, 1, 127, 0, 0, 1, 0, 0};
    if (read_exact(fd, req, 3) < 0 || write(fd, "\x05\x00", 2) != 2 ||
        read_exact(fd, req, 10) < 0 || req[1] != 1 || req[3] != 1 ||
        (to = dial(req[8] << 8 | req[9])) < 0 || write(fd, ok, sizeof ok) != (ssize_t)sizeof ok)
        goto out;
    struct splice_dir up = {fd, to}, down = {to, fd};
    pthread_t t;
    if (pthread_create(&t, NULL, splice_dir_run, &up) != 0)
        goto out;
    splice_dir_run(&down);
    pthread_join(t, NULL);
out:
    if (to >= 0)
        close(to);
    close(fd);
    return NULL;
}

static int run_splice(int port)
{
    struct sockaddr_in sa = loopback(port);
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 64) < 0) {
        perror("bulk splice: bind/listen");
        return 1;
    }
    for (;;) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0 && (errno == EINTR || errno == ECONNABORTED))
            continue;
        if (fd < 0) {
            perror("bulk splice: accept");
            return 1;
        }
        pthread_t t;
        if (pthread_create(&t, NULL, splice_conn, (void *)(intptr_t)fd) != 0)
            close(fd);
        else
            pthread_detach(t);
    }
}

/* The sockmap relay's kernel objects, one pair of sockets at a time: a SOCKMAP whose slot 0 holds
 * the client and slot 1 the upstream socket, an ARRAY of two u64 (slot k: bytes the program
 * redirected to socket k's send path) and the stream verdict program attached to the map. */
struct sockmap_relay {
    int map, counts, prog;
};

static long sys_bpf(int cmd, union bpf_attr *attr)
{
    return syscall(__NR_bpf, cmd, attr, sizeof(*attr));
}

static int bpf_map(enum bpf_map_type type, unsigned value_size, unsigned entries)
{
    union bpf_attr a;
    memset(&a, 0, sizeof(a));
    a.map_type = type;
    a.key_size = 4;
    a.value_size = value_size;
    a.max_entries = entries;
    return (int)sys_bpf(BPF_MAP_CREATE, &a);
}

static int bpf_update(int map, unsigned key, const void *value)
{
    union bpf_attr a;
    memset(&a, 0, sizeof(a));
    a.map_fd = (unsigned)map;
    a.key = (unsigned long)&key;
    a.value = (unsigned long)value;
    a.flags = BPF_ANY;
    return (int)sys_bpf(BPF_MAP_UPDATE_ELEM, &a);
}

static unsigned long long bpf_count(int map, unsigned key)
{
    unsigned long long v = 0;
    union bpf_attr a;
    memset(&a, 0, sizeof(a));
    a.map_fd = (unsigned)map;
    a.key = (unsigned long)&key;
    a.value = (unsigned long)&v;
    return sys_bpf(BPF_MAP_LOOKUP_ELEM, &a) == 0 ? v : 0;
}

#define INSN(c, d, s, o, i) \
    ((struct bpf_insn){.code = (c), .dst_reg = (d), .src_reg = (s), .off = (o), .imm = (i)})
#define LD_MAP(d, fd) \
    INSN(BPF_LD | BPF_DW | BPF_IMM, d, BPF_PSEUDO_MAP_FD, 0, fd), INSN(0, 0, 0, 0, 0)

/* Create the maps and load the verdict for a relay listening on @p port: a socket whose local
 * port is @p port is the client (slot 0) and goes to slot 1, any other to slot 0; on success
 * the verdict adds skb->len to the target's count. @return 0, or -1 with a message on stderr. */
static int sockmap_setup(struct sockmap_relay *r, int port)
{
    r->map = bpf_map(BPF_MAP_TYPE_SOCKMAP, 4, 2);
    r->counts = bpf_map(BPF_MAP_TYPE_ARRAY, 8, 2);
    if (r->map < 0 || r->counts < 0) {
        perror("bulk sockmap: BPF_MAP_CREATE");
        return -1;
    }
    struct bpf_insn prog[] = {
        INSN(BPF_ALU64 | BPF_MOV | BPF_X, 6, 1, 0, 0),  /* r6 = skb */
        /* a FIN alone comes as an empty skb: drop it, since the target's sending work takes
         * 0 bytes sent for a hard error (sk_err EPIPE, its sending stopped) */
        INSN(BPF_LDX | BPF_W | BPF_MEM, 2, 6, offsetof(struct __sk_buff, len), 0),
        INSN(BPF_JMP | BPF_JNE | BPF_K, 2, 0, 2, 0),
        INSN(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, SK_DROP),
        INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
        INSN(BPF_LDX | BPF_W | BPF_MEM, 2, 6, offsetof(struct __sk_buff, local_port), 0),
        INSN(BPF_ALU64 | BPF_MOV | BPF_K, 3, 0, 0, 1),  /* r3 = 1: the upstream */
        INSN(BPF_JMP | BPF_JEQ | BPF_K, 2, 0, 1, port), /* the client's socket? */
        INSN(BPF_ALU64 | BPF_MOV | BPF_K, 3, 0, 0, 0),  /* no: r3 = 0, the client */
        INSN(BPF_STX | BPF_W | BPF_MEM, 10, 3, -4, 0),  /* the target key on the stack */
        LD_MAP(2, r->map),
        INSN(BPF_ALU64 | BPF_MOV | BPF_X, 1, 6, 0, 0),
        INSN(BPF_ALU64 | BPF_MOV | BPF_K, 4, 0, 0, 0),  /* flags 0: the target's egress */
        INSN(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_sk_redirect_map),
        INSN(BPF_ALU64 | BPF_MOV | BPF_X, 7, 0, 0, 0),  /* r7 = the verdict */
        INSN(BPF_JMP | BPF_JNE | BPF_K, 0, 0, 8, SK_PASS),
        LD_MAP(1, r->counts),
        INSN(BPF_ALU64 | BPF_MOV | BPF_X, 2, 10, 0, 0),
        INSN(BPF_ALU64 | BPF_ADD | BPF_K, 2, 0, 0, -4),
        INSN(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_map_lookup_elem),
        INSN(BPF_JMP | BPF_JEQ | BPF_K, 0, 0, 2, 0),
        INSN(BPF_LDX | BPF_W | BPF_MEM, 1, 6, offsetof(struct __sk_buff, len), 0),
        INSN(BPF_STX | BPF_DW | BPF_ATOMIC, 0, 1, 0, BPF_ADD), /* lock *(u64 *)r0 += r1 */
        INSN(BPF_ALU64 | BPF_MOV | BPF_X, 0, 7, 0, 0),
        INSN(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
    };
    static char log[65536];
    union bpf_attr a;
    memset(&a, 0, sizeof(a));
    a.prog_type = BPF_PROG_TYPE_SK_SKB;
    a.insns = (unsigned long)prog;
    a.insn_cnt = sizeof(prog) / sizeof(prog[0]);
    a.license = (unsigned long)"GPL";
    a.log_buf = (unsigned long)log;
    a.log_size = sizeof(log);
    a.log_level = 1;
    r->prog = (int)sys_bpf(BPF_PROG_LOAD, &a);
    if (r->prog < 0) {
        fprintf(stderr, "bulk sockmap: BPF_PROG_LOAD: %s\n%s\n", strerror(errno), log);
        return -1;
    }
    memset(&a, 0, sizeof(a));
    a.target_fd = (unsigned)r->map;
    a.attach_bpf_fd = (unsigned)r->prog;
    a.attach_type = BPF_SK_SKB_STREAM_VERDICT;
    if (sys_bpf(BPF_PROG_ATTACH, &a) < 0) {
        perror("bulk sockmap: BPF_PROG_ATTACH");
        return -1;
    }
    return 0;
}

/* Bytes acked by the peer (@p acked) and received from it (@p received) on the socket @p fd. */
static void tcp_bytes(int fd, unsigned long long *acked, unsigned long long *received)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    memset(&ti, 0, sizeof(ti));
    getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len);
    *acked = ti.tcpi_bytes_acked;
    *received = ti.tcpi_bytes_received;
}

/* Relay the pair @p fd[0] (client) and @p fd[1] (upstream) through the sockmap until both
 * directions ended. A direction from socket k ends when k is at EOF, every byte received on k
 * and not read before the insert went through the verdict (its count reached k's
 * tcpi_bytes_received), and
 * the peer acked them (its tcpi_bytes_acked): then the peer is shut for writing. Shutting it
 * earlier would throw away what still waits in the kernel's queue for it. @return 0 once both
 * ended, -1 on a reset or an error. */
static int sockmap_pair(struct sockmap_relay *r, const int fd[2])
{
    unsigned long long zero = 0, acked0[2], recv0[2], acked, recv, dummy;
    for (unsigned k = 0; k < 2; k++) {
        /* what the verdict will see of k: all but what we read, queued bytes included (read
         * until no byte arrived between the two looks) */
        unsigned long long again;
        int inq;
        do {
            tcp_bytes(fd[k], &acked0[k], &recv0[k]);
            if (ioctl(fd[k], SIOCINQ, &inq) < 0)
                return -1;
            tcp_bytes(fd[k], &dummy, &again);
        } while (again != recv0[k]);
        recv0[k] -= (unsigned long long)inq;
        if (bpf_update(r->counts, k, &zero) < 0)
            return -1;
    }
    /* Until both are in, a verdict whose target slot is empty drops the data. So the upstream
     * goes first, and the client sends nothing before the SOCKS answer; an upstream that spoke
     * first would lose what came before the client's insert (and what sat in its receive queue
     * before its own insert would wait there for more data to come). */
    for (int k = 1; k >= 0; k--) {
        unsigned v = (unsigned)fd[k];
        if (bpf_update(r->map, (unsigned)k, &v) < 0) {
            perror("bulk sockmap: BPF_MAP_UPDATE_ELEM");
            return -1;
        }
    }
    unsigned char ok[10] = {5, 0, 0, 1, 127, 0, 0, 1, 0, 0};
    if (write(fd[0], ok, sizeof ok) != (ssize_t)sizeof ok)
        return -1;
    acked0[0] += sizeof ok;
    int eof[2] = {0, 0}, done[2] = {0, 0};
    struct pollfd p[2] = {{.fd = fd[0], .events = POLLRDHUP}, {.fd = fd[1], .events = POLLRDHUP}};
    while (!done[0] || !done[1]) {
        /* after an EOF, look again every millisecond until its direction drained */
        int waiting = (eof[0] && !done[0]) || (eof[1] && !done[1]);
        if (poll(p, 2, waiting ? 1 : -1) < 0 && errno != EINTR)
            return -1;
        for (unsigned k = 0; k < 2; k++) {
            if (p[k].revents & (POLLERR | POLLNVAL))
                return -1;
            if (p[k].revents & (POLLRDHUP | POLLHUP)) {
                eof[k] = 1;
                p[k].fd = -1; /* no more events from it */
            }
            if (!eof[k] || done[k])
                continue;
            unsigned o = 1 - k;
            unsigned long long moved = bpf_count(r->counts, o);
            tcp_bytes(fd[k], &dummy, &recv);
            tcp_bytes(fd[o], &acked, &dummy);
            /* tcpi_bytes_received counts the FIN as one byte */
            if (moved == recv - recv0[k] - 1 && acked - acked0[o] >= moved) {
                shutdown(fd[o], SHUT_WR);
                done[k] = 1;
            }
        }
    }
    return 0;
}

static int run_sockmap(int port)
{
    struct sockaddr_in sa = loopback(port);
    struct sockmap_relay r;
    int one = 1, lfd = socket(AF_INET, SOCK_STREAM, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 64) < 0) {
        perror("bulk sockmap: bind/listen");
        return 1;
    }
    if (sockmap_setup(&r, port) < 0)
        return 1;
    for (;;) {
        int fd[2] = {accept(lfd, NULL, NULL), -1};
        if (fd[0] < 0 && (errno == EINTR || errno == ECONNABORTED))
            continue;
        if (fd[0] < 0) {
            perror("bulk sockmap: accept");
            return 1;
        }
        unsigned char req[10];
        if (read_exact(fd[0], req, 3) == 0 && write(fd[0], "\x05\x00", 2) == 2 &&
            read_exact(fd[0], req, 10) == 0 && req[1] == 1 && req[3] == 1 &&
            (fd[1] = dial(req[8] << 8 | req[9])) >= 0 && sockmap_pair(&r, fd) < 0)
            fprintf(stderr, "bulk sockmap: the pair ended on an error or a reset\n");
        if (fd[1] >= 0)
            close(fd[1]);
        close(fd[0]);
    }
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "sink") == 0)
        return run_sink(atoi(argv[2]));
    if (argc >= 4 && argc <= 7 && strcmp(argv[1], "send") == 0)
        return run_send(atoi(argv[2]), atof(argv[3]), argc >= 5 ? (size_t)atol(argv[4]) : 0,
                        argc >= 6 ? atoi(argv[5]) : 0, argc == 7 ? (unsigned)atoi(argv[6]) : 0);
    if ((argc == 4 || argc == 5) && strcmp(argv[1], "hold") == 0)
        return run_hold(atoi(argv[2]), atoi(argv[3]), argc == 5 ? atoi(argv[4]) : 0);
    if (argc == 4 && strcmp(argv[1], "relay") == 0)
        return run_relay(atoi(argv[2]), atoi(argv[3]));
    if (argc == 3 && strcmp(argv[1], "splice") == 0)
        return run_splice(atoi(argv[2]));
    if (argc == 3 && strcmp(argv[1], "sockmap") == 0)
        return run_sockmap(atoi(argv[2]));
    fprintf(stderr, "usage: bulk sink PORT | bulk send PORT SECONDS [FIRST [DEST [MBIT]]] | "
                    "bulk hold PORT N [DEST] | bulk relay PORT TO | bulk splice PORT | "
                    "bulk sockmap PORT\n");
    return 2;
}
