"""IMPALA (Espeholt et al. 2018): unroll-producing actors and a V-trace learner."""
