/* ceiling: the least work an HTTP/1.1 server can do per request on this kernel.
 *
 * One thread, one level-triggered epoll loop. For every request head (found by
 * looking for "\r\n\r\n", nothing is parsed) it writes one fixed response held
 * in memory: one read and one write per request. No files, no Date header.
 * "Connection: close" in the head (or an HTTP/1.0 head without Keep-Alive, as ab
 * sends), or the MAX_REQUESTSth request on a connection, gets the response with
 * "Connection: close" and the connection is closed after it.
 * A short write (large bodies) is finished when the socket is writable again.
 *
 * usage: ceiling PORT [BODY_BYTES [MAX_REQUESTS]]
 *        (binds 127.0.0.1 only; defaults 4096 and 128)
 * Built by benches/load/run with gcc -O2; not part of ferrohttpd.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAXFD 65536

struct conn { const char *out; size_t left; int owed, served, close_req, closing, tail, reg; };
static struct conn C[MAXFD];
static char *resp[2]; /* [0] keep-alive, [1] Connection: close */
static size_t resp_len[2];
static int ep, max_requests;
static char buf[16384];

static void build(int i, size_t body) {
    char head[256];
    int n = snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nServer: ceiling\r\n"
                     "Content-Type: text/html\r\nContent-Length: %zu\r\nConnection: %s\r\n\r\n",
                     body, i ? "close" : "keep-alive");
    resp[i] = malloc(n + body);
    memcpy(resp[i], head, n);
    memset(resp[i] + n, 'x', body);
    resp_len[i] = n + body;
}

static void watch(int fd, unsigned events) { /* register on first need, then modify */
    struct epoll_event ev = { .events = events, .data.fd = fd };
    epoll_ctl(ep, C[fd].reg ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev);
    C[fd].reg = 1;
}

static void drop(int fd) { close(fd); C[fd] = (struct conn){0}; }

/* Send the owed responses. 1: waiting for EPOLLOUT; 0: all sent; -1: closed. */
static int send_owed(int fd) {
    struct conn *c = &C[fd];
    for (;;) {
        while (c->left) {
            ssize_t w = write(fd, c->out, c->left);
            if (w < 0) {
                if (errno == EAGAIN) { watch(fd, EPOLLOUT); return 1; }
                drop(fd); return -1;
            }
            c->out += w; c->left -= (size_t)w;
        }
        if (c->closing) { drop(fd); return -1; }
        if (!c->owed) return 0;
        c->owed--;
        c->closing = ++c->served >= max_requests || (c->close_req && !c->owed);
        c->out = resp[c->closing]; c->left = resp_len[c->closing];
    }
}

/* One read; answer every complete head in it. */
static void on_readable(int fd) {
    static const char end[] = "\r\n\r\n";
    struct conn *k = &C[fd];
    ssize_t r = read(fd, buf, sizeof buf);
    if (r < 0 && errno == EAGAIN) { if (!k->reg) watch(fd, EPOLLIN); return; }
    if (r <= 0) { drop(fd); return; }
    for (ssize_t j = 0; j < r; j++) { /* count heads; tail = matched part of end */
        k->tail = buf[j] == end[k->tail] ? k->tail + 1 : buf[j] == '\r';
        if (k->tail == 4) { k->owed++; k->tail = 0; }
    }
    if (memmem(buf, r, "onnection: close", 16) || memmem(buf, r, "onnection: Close", 16) ||
        (memmem(buf, r, " HTTP/1.0\r\n", 11) && !memmem(buf, r, "eep-", 4)))
        k->close_req = 1; /* HTTP/1.0 (ab) closes unless it asks for Keep-Alive */
    if (send_owed(fd) == 0 && !k->reg) watch(fd, EPOLLIN);
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: ceiling PORT [BODY_BYTES [MAX_REQUESTS]]\n"); return 2; }
    size_t body = argc > 2 ? strtoul(argv[2], 0, 10) : 4096;
    max_requests = argc > 3 ? (int)strtol(argv[3], 0, 10) : 128;
    if (max_requests < 1) { fprintf(stderr, "MAX_REQUESTS must be at least 1\n"); return 2; }
    build(0, body); build(1, body);
    signal(SIGPIPE, SIG_IGN);
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0), one = 1, defer = 5;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    /* inherited by accepted sockets: no per-connection setsockopt; accept only once the
       request has arrived, so it can be read at once without an epoll round trip */
    setsockopt(ls, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(ls, IPPROTO_TCP, TCP_DEFER_ACCEPT, &defer, sizeof defer);
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(atoi(argv[1])) };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) || listen(ls, 4096)) { perror("bind/listen"); return 1; }
    ep = epoll_create1(0);
    struct epoll_event lev = { .events = EPOLLIN, .data.fd = ls }, evs[256];
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &lev);
    printf("listening on http://127.0.0.1:%s/\n", argv[1]); fflush(stdout);
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd, c;
            if (fd == ls) {
                while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (c >= MAXFD) { close(c); continue; }
                    on_readable(c);
                }
            } else if (C[fd].left) { /* writable again: finish, then go back to reading */
                if (send_owed(fd) == 0) watch(fd, EPOLLIN);
            } else {
                on_readable(fd);
            }
        }
    }
}
