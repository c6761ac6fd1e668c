DROP TABLE IF EXISTS schedule_slots;
