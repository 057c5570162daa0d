/* Process-level helpers: clocks and memory statistics. */
#ifndef KVF_SYS_H
#define KVF_SYS_H

/* Milliseconds on a monotonic clock with an arbitrary origin; only
 * differences are meaningful. */
double sys_time_ms(void);

#endif
