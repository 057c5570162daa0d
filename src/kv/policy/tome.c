/* ToMe (Bolya et al., 2023), as a reduce stage inside the decoder (the
 * "ToMe (P)" baseline of paper 003): each image's tokens alternate into the
 * two sides of a bipartite graph, matched on the cosine of their keys
 * (averaged over heads), and up to half merge per stage; the decoder
 * averages them weighted by how many tokens each already stands for. */
#include "kv/reduce.h"

void reduce_tome(const float *metric, int dim, const struct reduce_group *g, double ratio, int *into, float *scratch) {
    int *rows = (int *)scratch;
    for (int i = 0; i < g->n; i++) rows[i] = g->first + i;
    reduce_bipartite(metric, dim, rows, g->n, ratio, into, scratch + g->n);
}
