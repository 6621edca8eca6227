-- Issue 77 (docs/results.md): each point's mean trained response length over steps 1-50 and
-- 151-200 (mean, min, max over seeds 0-4) and tokens generated per run, from the questions' store:
--     sqlite3 -header runs/scratch4/mlflow.db < benchmarks/scratch_lengths.sql
with r as (
 select r.run_uuid, r.name, coalesce((select value from params p where p.run_uuid=r.run_uuid and p.key='verify.ds'),'') ds,
   (select value from params p where p.run_uuid=r.run_uuid and p.key='train.method') method,
   cast((select value from params p where p.run_uuid=r.run_uuid and p.key='train.seed') as int) seed
 from runs r where r.status='FINISHED'),
per as (
 select r.method || case when r.ds='auto' then '-auto' else '' end pt, r.seed,
  avg(case when m.key='response_length_mean' and m.step<=50 then m.value end) q1,
  avg(case when m.key='response_length_mean' and m.step>150 then m.value end) q4,
  max(case when m.key='tokens_generated_total' then m.value end) gen
 from r join metrics m on m.run_uuid=r.run_uuid where r.seed<5 group by r.run_uuid)
select pt as point, count(*) as seeds, round(avg(q1), 1) as q1_mean, round(min(q1), 1) as q1_min,
  round(max(q1), 1) as q1_max, round(avg(q4), 1) as q4_mean, round(min(q4), 1) as q4_min,
  round(max(q4), 1) as q4_max, round(avg(gen)) as tokens_generated
from per group by pt;
-- and rollverify's (paper's thresholds) drift per version, drift_ops, by quarter of the steps
select r.name as run, round(avg(case when m.step <= 50 then m.value end), 5) as q1,
  round(avg(case when m.step > 50 and m.step <= 100 then m.value end), 5) as q2,
  round(avg(case when m.step > 100 and m.step <= 150 then m.value end), 5) as q3,
  round(avg(case when m.step > 150 then m.value end), 5) as q4
from runs r join metrics m on m.run_uuid = r.run_uuid
  join params p on p.run_uuid = r.run_uuid and p.key = 'verify.ds' and p.value = '0.01'
  join params t on t.run_uuid = r.run_uuid and t.key = 'train.method' and t.value = 'rollverify'
where m.key = 'drift_ops' and r.status = 'FINISHED' group by r.run_uuid order by r.name;
