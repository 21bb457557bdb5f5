/* A stand-in for fabtests' fi_rma_bw, which Debian 12 does not package: one-sided fi_read or
 * fi_write bandwidth between two processes on one libfabric provider, the floor the libfabric
 * helper is compared with (bench/compare_fabrics.sh). One operation in flight at a time, as
 * `rayaccel transfer` issues them; the target polls its completion queue throughout (the
 * software providers progress only when called).
 *
 *   ofi_rma_bw serve FILE SIZE              # writes its address and key to FILE
 *   ofi_rma_bw read|write FILE SIZE ITERS   # prints "<op> <size> x <iters>: <GB/s>"
 *
 * The provider is FI_PROVIDER's, as for any libfabric program. */
#define _GNU_SOURCE
#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct side {
  struct fi_info *info;
  struct fid_fabric *fabric;
  struct fid_domain *domain;
  struct fid_ep *ep;
  struct fid_cq *cq;
  struct fid_av *av;
  struct fid_mr *mr;
  char *buf;
  size_t size;
};

static void check(int rc, const char *what) {
  if (rc != 0) {
    fprintf(stderr, "ofi_rma_bw: %s: %s\n", what, fi_strerror(rc < 0 ? -rc : rc));
    exit(1);
  }
}

static void open_side(struct side *s, size_t size) {
  struct fi_info *hints = fi_allocinfo();
  hints->caps = FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
  hints->mode = FI_CONTEXT | FI_CONTEXT2;
  hints->ep_attr->type = FI_EP_RDM;
  hints->domain_attr->mr_mode = FI_MR_ALLOCATED | FI_MR_PROV_KEY;
  hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
  check(fi_getinfo(FI_VERSION(1, 17), NULL, NULL, 0, hints, &s->info), "fi_getinfo");
  fi_freeinfo(hints);
  check(fi_fabric(s->info->fabric_attr, &s->fabric, NULL), "fi_fabric");
  check(fi_domain(s->fabric, s->info, &s->domain, NULL), "fi_domain");
  struct fi_cq_attr cq_attr = {.format = FI_CQ_FORMAT_CONTEXT, .size = 64};
  struct fi_av_attr av_attr = {.type = FI_AV_MAP, .count = 4};
  check(fi_cq_open(s->domain, &cq_attr, &s->cq, NULL), "fi_cq_open");
  check(fi_av_open(s->domain, &av_attr, &s->av, NULL), "fi_av_open");
  check(fi_endpoint(s->domain, s->info, &s->ep, NULL), "fi_endpoint");
  check(fi_ep_bind(s->ep, &s->cq->fid, FI_TRANSMIT | FI_RECV), "fi_ep_bind cq");
  check(fi_ep_bind(s->ep, &s->av->fid, 0), "fi_ep_bind av");
  check(fi_enable(s->ep), "fi_enable");
  s->size = size;
  if (posix_memalign((void **)&s->buf, 4096, size) != 0) exit(1);
  memset(s->buf, 1, size);
  check(fi_mr_reg(s->domain, s->buf, size, FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE,
                  0, 0x5eed, 0, &s->mr, NULL),
        "fi_mr_reg");
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: ofi_rma_bw serve FILE SIZE | read|write FILE SIZE ITERS\n");
    return 2;
  }
  const size_t size = strtoull(argv[3], NULL, 0);
  struct side s = {0};
  open_side(&s, size);
  if (strcmp(argv[1], "serve") == 0) {
    char name[256];
    size_t len = sizeof(name);
    check(fi_getname(&s.ep->fid, name, &len), "fi_getname");
    uint64_t key = fi_mr_key(s.mr);
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", argv[2]);
    FILE *f = fopen(tmp, "wb");
    fwrite(&len, sizeof(len), 1, f);
    fwrite(name, 1, len, f);
    fwrite(&key, sizeof(key), 1, f);
    fclose(f);
    rename(tmp, argv[2]);
    /* Progress until the client's one message says it is done. */
    char done[64];
    struct fi_context2 ctx;
    check((int)fi_recv(s.ep, done, sizeof(done), NULL, FI_ADDR_UNSPEC, &ctx), "fi_recv");
    struct fi_cq_entry e;
    for (;;) {
      ssize_t n = fi_cq_read(s.cq, &e, 1);
      if (n == 1) break;
      if (n != -FI_EAGAIN) check((int)n, "fi_cq_read");
    }
    return 0;
  }
  if (argc < 5) return 2;
  const int read = strcmp(argv[1], "read") == 0;
  const int iters = atoi(argv[4]);
  FILE *f = NULL;
  for (int i = 0; i < 100 && (f = fopen(argv[2], "rb")) == NULL; ++i) usleep(100000);
  if (f == NULL) return 1;
  size_t len = 0;
  char name[256];
  uint64_t key = 0;
  if (fread(&len, sizeof(len), 1, f) != 1 || len > sizeof(name) || fread(name, 1, len, f) != len ||
      fread(&key, sizeof(key), 1, f) != 1) {
    return 1;
  }
  fclose(f);
  fi_addr_t peer;
  if (fi_av_insert(s.av, name, 1, &peer, 0, NULL) != 1) return 1;
  struct fi_context2 ctx;
  struct fi_cq_entry e;
  double start = 0;
  for (int i = -2; i < iters; ++i) { /* two warm-up operations */
    if (i == 0) start = now();
    ssize_t rc;
    do {
      rc = read ? fi_read(s.ep, s.buf, size, fi_mr_desc(s.mr), peer, 0, key, &ctx)
                : fi_write(s.ep, s.buf, size, fi_mr_desc(s.mr), peer, 0, key, &ctx);
      if (rc == -FI_EAGAIN) fi_cq_read(s.cq, &e, 0);
    } while (rc == -FI_EAGAIN);
    check((int)rc, read ? "fi_read" : "fi_write");
    for (;;) {
      ssize_t n = fi_cq_read(s.cq, &e, 1);
      if (n == 1) break;
      if (n != -FI_EAGAIN) check((int)n, "fi_cq_read");
    }
  }
  const double seconds = now() - start;
  printf("%s %zu x %d: %.2f GB/s\n", read ? "read" : "write", size, iters,
         (double)size * iters / seconds / 1e9);
  ssize_t rc;
  do {
    rc = fi_send(s.ep, "done", 4, NULL, peer, &ctx);
    if (rc == -FI_EAGAIN) fi_cq_read(s.cq, &e, 0);
  } while (rc == -FI_EAGAIN);
  for (;;) {
    ssize_t n = fi_cq_read(s.cq, &e, 1);
    if (n == 1 || (n != -FI_EAGAIN)) break;
  }
  return 0;
}
