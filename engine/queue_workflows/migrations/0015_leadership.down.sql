DROP TABLE IF EXISTS qw_orchestrators;
DROP TABLE IF EXISTS qw_leadership;
